"""Rock-DMQ: messages with an arbitrary delivery delay, kept in the local store until due."""
