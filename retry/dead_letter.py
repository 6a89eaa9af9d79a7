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
from retry.record import CorruptRecordError, RetryRecord, decode_record, record_to_json

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
        """JSON-ready dict: the record (see record_to_json) or, if it is corrupt, its raw bytes as base64."""
        doc: dict[str, Any] = {
            "id": self.id,
            "key": self.key.decode(errors="replace"),
            "reason": self.reason,
            "dead_at_ms": self.dead_at_ms,
        }
        if self.record is None:
            doc["raw_base64"] = base64.b64encode(self.raw).decode()
            return doc
        return {**record_to_json(self.record), **doc}


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
