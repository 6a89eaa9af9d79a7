"""The consume side of the RocketMQ client: allocation, process queues, offsets, pull and push."""
