"""DeadLetter: a message that left the retry ladder, its codec, and its JSON form (export, webhook).

The stored value keeps the record's bytes verbatim, so a corrupt record quarantined here keeps every
byte for inspection. Layout (version 1): version byte, 4-byte length, orjson metadata, record bytes.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any

import orjson

from retry.keys import parse_pending_key, pending_of_dead
from retry.record import CorruptRecordError, RetryRecord, decode_record

FORMAT_VERSION = 1
_HEADER = struct.Struct(">BI")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    key: bytes  # key in the dead-letter column family
    reason: str
    dead_at_ms: int
    raw: bytes  # the record's stored bytes
    record: RetryRecord | None  # None when ``raw`` does not decode (a quarantined value)

    @property
    def id(self) -> str:
        if self.record is not None:
            return self.record.id
        try:
            return parse_pending_key(pending_of_dead(self.key)).id
        except ValueError:
            return ""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: the body as base64, and as text too when it is UTF-8."""
        doc: dict[str, Any] = {
            "id": self.id,
            "key": self.key.decode(errors="replace"),
            "reason": self.reason,
            "dead_at_ms": self.dead_at_ms,
        }
        record = self.record
        if record is None:
            doc["raw_base64"] = base64.b64encode(self.raw).decode()
            return doc
        try:
            body_text: str | None = record.body.decode()
        except UnicodeDecodeError:
            body_text = None
        doc.update(
            topic=record.topic,
            type=record.type,
            tags=record.tags,
            keys=list(record.keys),
            properties=dict(record.properties),
            sharding_key=record.sharding_key,
            created_ms=record.created_ms,
            first_failure_ms=record.first_failure_ms,
            retry_count=record.retry_count,
            last_error=record.last_error,
            history=[{"at_ms": at, "error": err} for at, err in record.history],
            body_base64=base64.b64encode(record.body).decode(),
            body_text=body_text,
        )
        return doc


def encode_dead(reason: str, dead_at_ms: int, raw_record: bytes) -> bytes:
    meta = orjson.dumps({"reason": reason, "dead_at": dead_at_ms})
    return _HEADER.pack(FORMAT_VERSION, len(meta)) + meta + raw_record


def decode_dead(key: bytes, data: bytes) -> DeadLetter:
    """A dead letter whose own envelope is damaged is still returned, with the damage as its reason."""
    try:
        version, meta_len = _HEADER.unpack_from(data)
        if version != FORMAT_VERSION:
            raise ValueError(f"unknown dead-letter format version {version}")
        meta = orjson.loads(data[_HEADER.size : _HEADER.size + meta_len])
        reason, dead_at, raw = str(meta["reason"]), int(meta["dead_at"]), data[_HEADER.size + meta_len :]
    except (struct.error, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return DeadLetter(key, f"unreadable dead letter: {exc}", 0, data, None)
    try:
        record: RetryRecord | None = decode_record(raw)
    except CorruptRecordError:
        record = None
    return DeadLetter(key, reason, dead_at, raw, record)
