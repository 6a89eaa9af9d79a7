"""RetryRecord, the message as the retry store keeps it: a storage.message.StoredMessage with its
attempts and errors, and its bytes codec (storage.message's layout, version 1).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, replace
from typing import Any

from rocksidecar.storage.message import CorruptValueError, StoredMessage, decode, encode

HISTORY_LIMIT = 10  # failed attempts kept per record (the newest ones)


class CorruptRecordError(CorruptValueError):
    """Stored bytes that do not decode into a RetryRecord."""


@dataclass(frozen=True, slots=True)
class RetryRecord(StoredMessage):
    """One message waiting for redelivery (the stored message's fields first, then these)."""

    first_failure_ms: int = 0
    retry_count: int = 0
    last_error: str = ""
    history: tuple[tuple[int, str], ...] = ()  # (at_ms, error), oldest first
    # A delayed message whose publish failed: when it was due (the delay store's clock), so its replay
    # can tell how late it went out in the end (rocksidecar_delay_lateness_seconds); 0 for any other.
    delay_due_ms: int = 0

    @classmethod
    def of(cls, msg: StoredMessage, *, error: str = "", failed_at_ms: int | None = None) -> RetryRecord:
        """The one way a message becomes a stored retry: spooled after a send that failed at
        ``failed_at_ms`` with ``error`` (its first failure, in the history), or without a failure (spooled
        on purpose, to be sent in the background). Every field of ``msg`` is kept."""
        history = ((failed_at_ms, error),) if failed_at_ms else ()
        return cls(msg.id, msg.topic, msg.body, msg.tags, msg.keys, msg.properties, msg.sharding_key,
                   msg.type, msg.created_ms, failed_at_ms or 0, 0, error, history)  # fmt: skip

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
    own = {
        "first_failure": record.first_failure_ms,
        "retries": record.retry_count,
        "error": record.last_error,
        "history": [list(h) for h in record.history],
    }
    if record.delay_due_ms:
        own["delay_due"] = record.delay_due_ms  # absent otherwise: older versions read it as before
    return encode(record, own)


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
    fields, meta = decode(data, CorruptRecordError)
    try:
        first_failure, retries, error, history = (
            meta["first_failure"], meta["retries"], meta["error"], meta["history"]
        )  # fmt: skip
        if type(first_failure) is not int or type(retries) is not int or type(error) is not str:
            raise TypeError("first_failure and retries must be integers, error a string")
        if type(history) is not list or not all(type(at) is int and type(err) is str for at, err in history):
            raise TypeError("history entries must be [int, string]")
        delay_due = meta.get("delay_due", 0)
        if type(delay_due) is not int:
            raise TypeError("delay_due must be an integer")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"bad record metadata: {exc}") from exc
    history_ = tuple((at, err) for at, err in history)
    return RetryRecord(*fields, first_failure, retries, error, history_, delay_due)
