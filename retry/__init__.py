"""The local retry store: messages that could not be delivered yet, replayed on a back-off ladder."""
