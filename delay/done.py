"""DoneMarkers: what became of a message that left the schedule (sent or cancelled, and when), kept for
a retention window so that a late cancel can still answer "already sent", then purged in time order.

A marker's detail (delay.keys.done_value) is empty or JSON: the previous version's form, a list (where a
SENT message was stored), which is still written when there is nothing more to keep (a marker that
version can read), or an object with any of ``to`` (that list), ``topic`` and ``due`` (the message's due
time), so that the status of a message that left the schedule still names its topic and deliverAt."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import orjson

from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.keys import clamp_due, due_bound
from rocksidecar.storage.kv import KV, Delete, Op, Put
from rocksidecar.storage.status import StoredAt

from .keys import (
    CANCELLED,
    DONE_CF,
    EXPIRY_CF,
    SENT,
    done_detail,
    done_value,
    due_key,
    split_done,
    split_due_key,
)
from .status import DelayState

log = logging.getLogger(__name__)

STATES = {SENT: DelayState.SENT, CANCELLED: DelayState.CANCELLED}


class Done(NamedTuple):
    """A marker read: SENT or CANCELLED at ``at_ms``; what it kept of the message, when it did (one of the
    previous version, or of an id the store did not hold, keeps no topic or due time; a copy dropped for
    a Rock-DMQ mark keeps no topic)."""

    state: DelayState
    at_ms: int
    sent_to: StoredAt | None = None
    topic: str | None = None
    due_ms: int | None = None


class DoneMarkers:
    def __init__(self, kv: KV, writer: GroupCommitWriter, retention_ms: int) -> None:
        self._kv = kv
        self._writer = writer
        self._retention_ms = retention_ms
        self._purged_to = b""  # every expiry key below this is gone

    @staticmethod
    def ops(id_: str, kind: bytes, at_ms: int, detail: bytes = b"") -> tuple[Op, Op]:
        """The marker "``id_`` was SENT or CANCELLED at ``at_ms``" (with ``detail``: marker_detail) and its
        expiry entry."""
        at = clamp_due(at_ms)
        return Put(DONE_CF, id_.encode(), done_value(kind, at, detail)), Put(EXPIRY_CF, due_key(at, id_), b"")

    def get(self, id_: str) -> Done | None:
        raw = self._kv.get(DONE_CF, id_.encode())
        return None if raw is None else _read(id_, raw)

    def get_many(self, ids: list[str]) -> list[Done | None]:
        """``get`` of each id, in one multi-get."""
        raws = self._kv.get_many(DONE_CF, [id_.encode() for id_ in ids])
        return [None if raw is None else _read(id_, raw) for id_, raw in zip(ids, raws, strict=True)]

    async def purge(self, now_ms: int, limit: int) -> int:
        """Drop up to ``limit`` markers older than the retention; returns how many expired."""
        bound = due_bound(now_ms - self._retention_ms)
        rows = self._kv.scan(EXPIRY_CF, lower=self._purged_to, upper=bound, limit=limit)
        ops: list[Op] = []
        for key, _ in rows:
            ops.append(Delete(EXPIRY_CF, key))
            try:
                at_ms, id_ = split_due_key(key)
            except ValueError:
                continue
            done = self.get(id_)
            if done is not None and done[1] == at_ms:  # not replaced by a later outcome of the same id
                ops.append(Delete(DONE_CF, id_.encode()))
        if ops:
            await self._writer.write(ops)
            self._purged_to = rows[-1][0] + b"\x00"
        return len(rows)


def _read(id_: str, raw: bytes) -> Done | None:
    try:
        kind, at_ms = split_done(raw)
    except ValueError:
        log.error("unreadable done marker for %r: %r", id_, raw)
        return None
    detail = done_detail(raw)
    if not detail:
        return Done(STATES[kind], at_ms)
    try:
        doc = orjson.loads(detail)
        if isinstance(doc, list):  # the previous version's form: where it was stored
            return Done(STATES[kind], at_ms, _stored_at(doc))
        where, topic, due = doc.get("to"), doc.get("topic"), doc.get("due")
        if not (topic is None or isinstance(topic, str)) or not (due is None or type(due) is int):
            raise TypeError(f"topic {topic!r}, due {due!r}")
        return Done(STATES[kind], at_ms, None if where is None else _stored_at(where), topic, due)
    except (ValueError, TypeError, AttributeError):  # AttributeError: JSON that is neither form
        log.error("unreadable detail in a done marker: %r", detail)
        return Done(STATES[kind], at_ms)


def marker_detail(sent_to: StoredAt | None, topic: str | None = None, due_ms: int | None = None) -> bytes:
    """What a marker keeps of its message: where a SENT one was stored, its topic and due time (the
    previous version's form when there is no topic or due time)."""
    where = (
        None
        if sent_to is None
        else [sent_to.broker, sent_to.queue_id, sent_to.queue_offset, sent_to.offset_msg_id]
    )
    if topic is None and due_ms is None:  # the previous version's form: it reads these
        return b"" if where is None else orjson.dumps(where)
    doc: dict[str, Any] = {} if where is None else {"to": where}
    if topic is not None:
        doc["topic"] = topic
    if due_ms is not None:
        doc["due"] = due_ms
    return orjson.dumps(doc)


def _stored_at(where: Any) -> StoredAt:
    """Raises ValueError or TypeError for anything but [broker, queue id, queue offset, msg id]."""
    broker, queue_id, queue_offset, offset_msg_id = where
    return StoredAt(str(broker), int(queue_id), int(queue_offset), str(offset_msg_id))
