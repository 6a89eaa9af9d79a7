"""devbroker: a small RocketMQ-protocol-compatible name server and brokers, for local runs and tests."""
