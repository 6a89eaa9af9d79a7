"""RetryRecord, the message as the retry store keeps it, and its versioned bytes codec.

Layout (version 1): storage.framing with orjson metadata, then the body verbatim.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from storage.framing import frame, unframe

FORMAT_VERSION = 1
HISTORY_LIMIT = 10  # failed attempts kept per record (the newest ones)


class CorruptRecordError(ValueError):
    """Stored bytes that do not decode into a RetryRecord."""


@dataclass(frozen=True, slots=True)
class RetryRecord:
    """One message waiting for redelivery. ``type`` selects the retry policy; it defaults to the topic."""

    id: str  # RocketMQ UNIQ_KEY: stable across attempts, so consumers can deduplicate
    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    sharding_key: str | None = None
    type: str = ""
    created_ms: int = 0
    first_failure_ms: int = 0
    retry_count: int = 0
    last_error: str = ""
    history: tuple[tuple[int, str], ...] = ()  # (at_ms, error), oldest first

    def __post_init__(self) -> None:
        if not self.type:
            object.__setattr__(self, "type", self.topic)

    @property
    def failed_attempts(self) -> int:
        """Failed deliveries so far: the replays (retry_count) plus the send that failed before the
        message was spooled, if one did (it is in the history but did not count as a retry). Exact while
        the history is not truncated, i.e. below HISTORY_LIMIT replays."""
        return self.retry_count + (len(self.history) > self.retry_count)

    def failed(self, at_ms: int, error: str) -> RetryRecord:
        """This record after one more failed attempt at ``at_ms``."""
        history = (*self.history, (at_ms, error))[-HISTORY_LIMIT:]
        return replace(
            self,
            retry_count=self.retry_count + 1,
            last_error=error,
            history=history,
            first_failure_ms=self.first_failure_ms or at_ms,
        )


def encode_record(record: RetryRecord) -> bytes:
    meta = orjson.dumps(
        {
            "id": record.id,
            "topic": record.topic,
            "tags": record.tags,
            "keys": list(record.keys),
            "props": dict(record.properties),
            "sk": record.sharding_key,
            "type": record.type,
            "created": record.created_ms,
            "first_failure": record.first_failure_ms,
            "retries": record.retry_count,
            "error": record.last_error,
            "history": [list(h) for h in record.history],
        }
    )
    return frame(FORMAT_VERSION, meta, record.body)


def record_to_json(record: RetryRecord) -> dict[str, Any]:
    """JSON-ready dict (CLI, export, webhook): the body as base64, and as text too when it is UTF-8."""
    try:
        body_text: str | None = record.body.decode()
    except UnicodeDecodeError:
        body_text = None
    return {
        "id": record.id,
        "topic": record.topic,
        "type": record.type,
        "tags": record.tags,
        "keys": list(record.keys),
        "properties": dict(record.properties),
        "sharding_key": record.sharding_key,
        "created_ms": record.created_ms,
        "first_failure_ms": record.first_failure_ms,
        "retry_count": record.retry_count,
        "last_error": record.last_error,
        "history": [{"at_ms": at, "error": err} for at, err in record.history],
        "body_base64": base64.b64encode(record.body).decode(),
        "body_text": body_text,
    }


def decode_record(data: bytes) -> RetryRecord:
    """Raises CorruptRecordError for anything that is not a well-formed version-1 record."""
    try:
        meta, body = unframe(data, FORMAT_VERSION)
    except ValueError as exc:
        raise CorruptRecordError(f"not a record: {exc}") from exc
    try:
        return _from_meta(orjson.loads(meta), body)
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"bad record metadata: {exc}") from exc


_STR_FIELDS = ("id", "topic", "type", "error")
_INT_FIELDS = ("created", "first_failure", "retries")


def _from_meta(meta: dict[str, Any], body: bytes) -> RetryRecord:
    # Types are checked field by field (a flipped type is corruption too), inline: this runs once per
    # replayed message.
    for name in _STR_FIELDS:
        if type(meta[name]) is not str:
            raise TypeError(f"{name}: expected a string")
    for name in _INT_FIELDS:
        if type(meta[name]) is not int:
            raise TypeError(f"{name}: expected an integer")
    tags, sharding_key = meta["tags"], meta["sk"]
    keys, props, history = meta["keys"], meta["props"], meta["history"]
    if not (tags is None or type(tags) is str) or not (sharding_key is None or type(sharding_key) is str):
        raise TypeError("tags and sharding key must be strings or null")
    if type(keys) is not list or type(props) is not dict or type(history) is not list:
        raise TypeError("keys, properties and history must be a list, an object and a list")
    if not all(type(k) is str for k in keys) or not all(type(v) is str for v in props.values()):
        raise TypeError("keys and property values must be strings")
    if not all(type(at) is int and type(err) is str for at, err in history):
        raise TypeError("history entries must be [int, string]")
    if not meta["id"] or not meta["topic"]:
        raise ValueError("record without id or topic")
    return RetryRecord(
        id=meta["id"],
        topic=meta["topic"],
        body=body,
        tags=tags,
        keys=tuple(keys),
        properties=props,
        sharding_key=sharding_key,
        type=meta["type"],
        created_ms=meta["created"],
        first_failure_ms=meta["first_failure"],
        retry_count=meta["retries"],
        last_error=meta["error"],
        history=tuple((at, err) for at, err in history),
    )
