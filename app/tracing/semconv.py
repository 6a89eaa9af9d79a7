"""The attributes of the sidecar's messaging spans, after OpenTelemetry's messaging semantic conventions:
one place that says which attribute a message, a send's result or an operation gives, read by the span
hooks (app.tracing.spans) and, for the spans app.tracing.fast records, by the OTLP encoder."""

from __future__ import annotations

from typing import Any

from rocksidecar.rmq import Message, SendResult

MESSAGE_ID = "messaging.message.id"
BODY_SIZE = "messaging.message.body.size"
TAG = "messaging.rocketmq.message.tag"
KEYS = "messaging.rocketmq.message.keys"
PARTITION = "messaging.destination.partition.id"
BROKER = "messaging.rocketmq.broker"
ATTEMPTS = "rocksidecar.attempts"
OUTCOME = "rocksidecar.outcome"
MESSAGE_KEYS = frozenset({MESSAGE_ID, BODY_SIZE, TAG, KEYS})  # what message_attributes may give
RESULT_KEYS = frozenset({PARTITION, BROKER, ATTEMPTS})  # what result_attributes gives


def named(operation: str, topic: str) -> dict[str, Any]:
    """The attributes every messaging span must have (the semantic conventions' required ones)."""
    return {
        "messaging.system": "rocketmq",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": topic,
    }


# What a message's attributes are made of (id, tags, keys, body size): what a span keeps of the message it
# sent, never the body itself (a queued span would hold it until its export)
Facts = tuple[str | None, str | None, tuple[str, ...], int]


def facts(msg: Message) -> Facts:
    return (msg.id, msg.tags, msg.keys, len(msg.body))


def message_attributes(msg: Message, attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` with ``msg``'s own attributes (id, tag, keys, body size) added, in that order."""
    return facts_attributes(facts(msg), attrs)


def facts_attributes(of: Facts, attrs: dict[str, Any]) -> dict[str, Any]:
    msg_id, tags, keys, size = of
    if msg_id is not None:
        attrs[MESSAGE_ID] = msg_id
    tags_and_keys(tags, keys, attrs)
    attrs[BODY_SIZE] = size
    return attrs


def tags_and_keys(tags: str | None, keys: tuple[str, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    if tags:
        attrs[TAG] = tags
    if keys:
        attrs[KEYS] = list(keys)
    return attrs


def result_attributes(result: SendResult) -> dict[str, Any]:
    """Where a send went, and after how many attempts."""
    return {
        PARTITION: str(result.queue.queue_id),
        BROKER: result.queue.broker_name,
        ATTEMPTS: result.attempts,
    }
