"""StoredMessage, the message as the local stores keep it, and the codec of its fields.

Both record kinds are a StoredMessage with their own state added: retry.record.RetryRecord (attempts,
errors) and delay.message.DelayedMessage (due time). Their values share one layout, version 1:
storage.framing with orjson metadata (this module's nine fields under the names below, plus the
kind's own), then the body verbatim. The layout is the one both codecs wrote before they were merged,
so values already on disk read unchanged (tests/storage/test_message.py holds bytes the old codecs
wrote).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from .framing import frame, unframe

FORMAT_VERSION = 1


class CorruptValueError(ValueError):
    """Stored bytes that do not decode into the record they should hold."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message kept until it is delivered. ``type`` selects the retry policy; it defaults to the topic."""

    id: str  # RocketMQ UNIQ_KEY: kept on every send, so consumers can deduplicate
    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    sharding_key: str | None = None
    type: str = ""
    created_ms: int = 0

    def __post_init__(self) -> None:
        if not self.type:
            object.__setattr__(self, "type", self.topic)

    def message_fields(self) -> dict[str, Any]:
        """The nine fields as keyword arguments: to make another record kind that carries this message."""
        return {name: getattr(self, name) for name in _MESSAGE_FIELDS}


_MESSAGE_FIELDS = tuple(f.name for f in fields(StoredMessage))  # not a record kind's own fields


def encode(msg: StoredMessage, own: Mapping[str, Any]) -> bytes:
    """The stored value of ``msg``, with the record kind's ``own`` metadata after the message's."""
    meta = {
        "id": msg.id,
        "topic": msg.topic,
        "tags": msg.tags,
        "keys": list(msg.keys),
        "props": dict(msg.properties),
        "sk": msg.sharding_key,
        "type": msg.type,
        "created": msg.created_ms,
        **own,
    }
    return frame(FORMAT_VERSION, orjson.dumps(meta), msg.body)


MessageFields = tuple[str, str, bytes, str | None, tuple[str, ...], dict[str, str], str | None, str, int]


def decode(data: bytes, error: type[CorruptValueError]) -> tuple[MessageFields, dict[str, Any]]:
    """(the message's fields in StoredMessage's order, the whole metadata) of a stored value; the
    record kind checks and takes its own fields from the metadata. A tuple, not keyword arguments: this
    runs once per replayed or published message, and positional construction is the cheap one.

    Raises:
        ``error``: not a well-formed version-1 value, or a message field of the wrong type.
    """
    try:
        meta_bytes, body = unframe(data, FORMAT_VERSION)
    except ValueError as exc:
        raise error(f"not a stored message: {exc}") from exc
    try:
        meta = orjson.loads(meta_bytes)
        return _message_fields(meta, body), meta
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise error(f"bad metadata: {exc}") from exc


def _message_fields(meta: dict[str, Any], body: bytes) -> MessageFields:
    # A flipped type is corruption too: every field is checked, inline (this runs once per replayed or
    # published message, so no generator where a plain test does).
    id_, topic, type_, created = meta["id"], meta["topic"], meta["type"], meta["created"]
    if type(id_) is not str or type(topic) is not str or type(type_) is not str:
        raise TypeError("id, topic and type must be strings")
    if type(created) is not int:
        raise TypeError("created must be an integer")
    tags, sharding_key, keys, props = meta["tags"], meta["sk"], meta["keys"], meta["props"]
    if not (tags is None or type(tags) is str) or not (sharding_key is None or type(sharding_key) is str):
        raise TypeError("tags and sharding key must be strings or null")
    if type(keys) is not list or (keys and not all(type(k) is str for k in keys)):
        raise TypeError("keys must be a list of strings")
    if type(props) is not dict or (props and not all(type(v) is str for v in props.values())):
        raise TypeError("properties must map strings to strings")
    if not id_ or not topic:
        raise ValueError("message without id or topic")
    return (id_, topic, body, tags, tuple(keys), props, sharding_key, type_, created)
