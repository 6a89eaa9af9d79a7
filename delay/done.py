"""DoneMarkers: what became of a message that left the schedule (sent or cancelled, and when), kept for
a retention window so that a late cancel can still answer "already sent", then purged in time order."""

from __future__ import annotations

import logging

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


class DoneMarkers:
    def __init__(self, kv: KV, writer: GroupCommitWriter, retention_ms: int) -> None:
        self._kv = kv
        self._writer = writer
        self._retention_ms = retention_ms
        self._purged_to = b""  # every expiry key below this is gone

    @staticmethod
    def ops(id_: str, kind: bytes, at_ms: int, sent_to: StoredAt | None = None) -> tuple[Op, Op]:
        """The marker "``id_`` was SENT (to ``sent_to``) or CANCELLED at ``at_ms``" and its expiry entry."""
        at = clamp_due(at_ms)
        detail = (
            b""
            if sent_to is None
            else orjson.dumps([sent_to.broker, sent_to.queue_id, sent_to.queue_offset, sent_to.offset_msg_id])
        )
        return Put(DONE_CF, id_.encode(), done_value(kind, at, detail)), Put(EXPIRY_CF, due_key(at, id_), b"")

    def get(self, id_: str) -> tuple[DelayState, int, StoredAt | None] | None:
        raw = self._kv.get(DONE_CF, id_.encode())
        if raw is None:
            return None
        try:
            kind, at_ms = split_done(raw)
        except ValueError:
            log.error("unreadable done marker for %r: %r", id_, raw)
            return None
        return STATES[kind], at_ms, _stored_at(done_detail(raw))

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


def _stored_at(detail: bytes) -> StoredAt | None:
    if not detail:
        return None
    try:
        broker, queue_id, queue_offset, offset_msg_id = orjson.loads(detail)
        return StoredAt(str(broker), int(queue_id), int(queue_offset), str(offset_msg_id))
    except (ValueError, TypeError):
        log.error("unreadable detail in a done marker: %r", detail)
        return None
