"""Subscriptions: the sidecar consumes RocketMQ topics for the app and pushes each message to it over
HTTP as a CloudEvent (binary content mode)."""
