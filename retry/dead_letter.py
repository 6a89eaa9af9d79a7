"""DeadLetter: a message that left the retry ladder, its codec, and its JSON form (export, webhook).

The stored value keeps the record's bytes verbatim, so a corrupt record quarantined here keeps every
byte for inspection. Layout (version 1): storage.framing with orjson metadata, then the record's bytes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson

from rocksidecar.storage.framing import frame, unframe
from rocksidecar.storage.keys import MAX_DUE_MS

from .keys import parse_pending_key, pending_of_dead
from .record import CorruptRecordError, RetryRecord, decode_record, record_to_json

FORMAT_VERSION = 1


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
    return frame(FORMAT_VERSION, meta, raw_record)


def decode_dead(key: bytes, data: bytes) -> DeadLetter:
    """A dead letter whose own envelope is damaged is still returned, with the damage as its reason."""
    try:
        meta_bytes, raw = unframe(data, FORMAT_VERSION)
        meta = orjson.loads(meta_bytes)
        reason, dead_at = str(meta["reason"]), int(meta["dead_at"])
        # A death time outside the keys' range [0, MAX_DUE_MS] (to the year 2286) is none bury wrote,
        # and no view can show it as a date (/ui answered 500 for the whole page): damage.
        if not 0 <= dead_at <= MAX_DUE_MS:
            raise ValueError(f"dead_at {dead_at} ms is outside [0, {MAX_DUE_MS}]")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return DeadLetter(key, f"unreadable dead letter: {exc}", 0, data, None)
    try:
        record: RetryRecord | None = decode_record(raw)
    except CorruptRecordError:
        record = None
    return DeadLetter(key, reason, dead_at, raw, record)
