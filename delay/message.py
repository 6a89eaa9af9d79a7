"""DelayedMessage, a message waiting in the delay store for its due time, and its versioned bytes codec.

Layout (version 1): storage.framing with orjson metadata, then the body verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from storage.framing import frame, unframe

FORMAT_VERSION = 1

# Properties a published message carries (epoch ms), so consumers can see how late it arrived.
DELAY_DUE_AT = "DELAY_DUE_AT"
DELAY_PUBLISHED_AT = "DELAY_PUBLISHED_AT"


class CorruptMessageError(ValueError):
    """Stored bytes that do not decode into a DelayedMessage."""


@dataclass(frozen=True, slots=True)
class DelayedMessage:
    """One message to publish to ``topic`` at ``due_ms`` (epoch ms). ``type`` defaults to the topic."""

    id: str  # RocketMQ UNIQ_KEY: kept when published, so consumers can deduplicate
    topic: str
    body: bytes
    due_ms: int
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    sharding_key: str | None = None
    type: str = ""
    created_ms: int = 0

    def __post_init__(self) -> None:
        if not self.type:
            object.__setattr__(self, "type", self.topic)

    def for_publish(self, published_at_ms: int) -> DelayedMessage:
        """This message with the requested and actual delivery times added to its properties."""
        props = {**self.properties, DELAY_DUE_AT: str(self.due_ms), DELAY_PUBLISHED_AT: str(published_at_ms)}
        # The constructor, not dataclasses.replace: this runs once per published message, 3x faster.
        return DelayedMessage(self.id, self.topic, self.body, self.due_ms, self.tags, self.keys, props,
                              self.sharding_key, self.type, self.created_ms)  # fmt: skip


def encode_message(msg: DelayedMessage) -> bytes:
    meta = orjson.dumps(
        {
            "id": msg.id,
            "topic": msg.topic,
            "due": msg.due_ms,
            "tags": msg.tags,
            "keys": list(msg.keys),
            "props": dict(msg.properties),
            "sk": msg.sharding_key,
            "type": msg.type,
            "created": msg.created_ms,
        }
    )
    return frame(FORMAT_VERSION, meta, msg.body)


def decode_message(data: bytes) -> DelayedMessage:
    """Raises CorruptMessageError for anything that is not a well-formed version-1 message."""
    try:
        meta, body = unframe(data, FORMAT_VERSION)
    except ValueError as exc:
        raise CorruptMessageError(f"not a delayed message: {exc}") from exc
    try:
        return _from_meta(orjson.loads(meta), body)
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptMessageError(f"bad metadata: {exc}") from exc


def _from_meta(meta: dict[str, Any], body: bytes) -> DelayedMessage:
    # A flipped type is corruption too: every field is checked, inline (this runs once per published
    # message, so no generator where a plain test does).
    id_, topic, type_, due, created = meta["id"], meta["topic"], meta["type"], meta["due"], meta["created"]
    if type(id_) is not str or type(topic) is not str or type(type_) is not str:
        raise TypeError("id, topic and type must be strings")
    if type(due) is not int or type(created) is not int:
        raise TypeError("due and created must be integers")
    tags, sharding_key, keys, props = meta["tags"], meta["sk"], meta["keys"], meta["props"]
    if not (tags is None or type(tags) is str) or not (sharding_key is None or type(sharding_key) is str):
        raise TypeError("tags and sharding key must be strings or null")
    if type(keys) is not list or (keys and not all(type(k) is str for k in keys)):
        raise TypeError("keys must be a list of strings")
    if type(props) is not dict or (props and not all(type(v) is str for v in props.values())):
        raise TypeError("properties must map strings to strings")
    if not id_ or not topic:
        raise ValueError("message without id or topic")
    return DelayedMessage(id_, topic, body, due, tags, tuple(keys), props, sharding_key, type_, created)
