"""DelayStore: delayed messages kept in the local store under due-time-first keys until they are published.

Column families are listed in delay.keys. Every change is one atomic batch through the group-commit
writer, and no method returns before its batch is synced. The due keys live in the due-queue engine
(storage.due_queue); the scheduler and cancel take claims on them there, so a message is either
published or cancelled, never both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Container, Sequence

from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.due_queue import DueQueue, QueueBacked, Then
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.keys import MAX_DUE_MS, clamp_due, parse_due
from rocksidecar.storage.kv import KV, Delete, Op, Put
from rocksidecar.storage.status import StoredAt

from .done import DoneMarkers, marker_detail
from .keys import (
    CANCELLED,
    DUE_CF,
    INDEX_CF,
    META_CF,
    SENT,
    due_key,
    index_dues,
    index_key,
    index_prefix,
    split_due_key,
)
from .message import CorruptMessageError, DelayedMessage, decode_message, encode_message
from .status import CancelOutcome, DelayState, DelayStats, DelayStatus

RETENTION_S = 24 * 3600.0  # how long "sent" / "cancelled" answers are kept after the fact
PURGE_LIMIT = 500  # done markers dropped per purge batch (one synced write)


def stored_ops(msg: DelayedMessage) -> tuple[bytes, tuple[Put, Put]]:
    """``msg``'s due key (its due time clamped into the keys' range) and the two puts that store it: the
    message under that key and its id's index entry (what DelayStore.schedule_many writes; the
    benchmarks fill stores with the same)."""
    due = clamp_due(msg.due_ms)
    key = due_key(due, msg.id)
    return key, (Put(DUE_CF, key, encode_message(msg)), Put(INDEX_CF, index_key(msg.id, due), b""))


class DelayStore(QueueBacked):
    """Schedule, cancel and look up delayed messages; the scheduler claims, publishes and records them.

    The pending count is kept in memory from a key count at open (storage.key_count), changed by what
    each batch the store holds adds and removes, synced or not (a batch whose WAL sync failed after its
    apply is in the store: storage.errors.UnsyncedError). Batches writing the same due key are written
    one after the other (``_commit_keys``), so what one reads before it is written is what it changes.
    """

    def __init__(
        self,
        kv: KV,
        writer: GroupCommitWriter,
        *,
        now_ms: Callable[[], int] = wall_ms,
        clock: Callable[[], float] = time.monotonic,
        retention_s: float = RETENTION_S,
    ) -> None:
        # Due keys are claimed by the scheduler (publishing) and by a cancel.
        super().__init__(DueQueue(kv, writer, DUE_CF, META_CF, "delay store's", now_ms=now_ms, clock=clock))
        self._done = DoneMarkers(kv, writer, int(retention_s * 1000))
        self._removed: list[Callable[[list[bytes]], None]] = []
        # how drop_published_many found the ids' copies since start: "point" (at the marked due, by the
        # batch's multi-get) or "scan" (the id's index scan: no due given, or not found at it)
        self.drop_lookups = {"point": 0, "scan": 0}
        # Due key -> the end of the batch writing it now: a batch writing a key waits for the one before
        # it, else both read the key's state before either is written and count it twice (two schedules
        # of one message at once) or not at all (a schedule queued behind a cancel of it).
        self._writing: dict[bytes, asyncio.Future[None]] = {}
        # Keys whose mark_sent was applied and counted out but not synced: the scheduler writes it again
        # (it keeps their claims), and that write must not count them out twice.
        self._counted_out: set[bytes] = set()

    def add_removed_listener(self, listener: Callable[[list[bytes]], None]) -> None:
        """``listener(keys)`` runs once a cancel or another replica's mark (drop_published) removed the
        due ``keys`` (written): the scheduler forgets those it holds instead of reading them again."""
        self._removed.append(listener)

    def remove_removed_listener(self, listener: Callable[[list[bytes]], None]) -> None:
        if listener in self._removed:
            self._removed.remove(listener)

    def wait_counted(self, timeout_s: float | None = None) -> bool:
        """Wait for the exact count behind pending_count (tests); whether it is done."""
        return self._pending.wait(timeout_s)

    async def close(self) -> None:
        """Write the seek floor one last time, so a clean restart seeks from the exact floor. The
        writer and the KV belong to the caller."""
        self._pending.close()
        await self.queue.save()

    # --- scheduling and cancelling --------------------------------------------------------------
    async def schedule(self, msg: DelayedMessage) -> None:
        """Store ``msg`` durably, to be published at ``msg.due_ms`` (clamped into the key range).

        Raises:
            StorageError: not stored; the caller must not acknowledge the message.
        """
        await self.schedule_many((msg,))

    async def schedule_many(self, msgs: Sequence[DelayedMessage]) -> None:
        """Store several messages in one batch, all or none. Scheduling the same id at the same due
        time again overwrites it (one message)."""
        if not msgs:
            return
        ops: list[Op] = []
        keys: list[bytes] = []
        for msg in msgs:
            key, puts = stored_ops(msg)
            keys.append(key)
            ops += puts
        added = 0

        def count() -> None:  # after the batches before it that write these keys, before its own
            nonlocal added
            unique = set(keys)
            added = len(unique) - sum(1 for key in unique if self.kv.get(DUE_CF, key) is not None)

        def written(held: bool, synced: bool) -> None:
            if held:
                self._pending.add(added)
                if self._counted_out:  # stored again: a mark of them written later deletes them
                    self._counted_out.difference_update(keys)

        await self._commit_keys(keys, ops, written, new_key=min(keys), before=count)

    async def restamp(self, msgs: Sequence[DelayedMessage], created_ms: int) -> int:
        """Rewrite the stored copies of ``msgs`` with ``created_ms`` (Rock-DMQ's refresh of a copy whose
        age was unknown); returns how many were rewritten. Only a copy still stored as ``msgs`` has it is
        written: one cancelled, published or stored again since is left as it is (a plain schedule would
        bring a cancelled or published message back). No key is added or removed.

        Raises:
            StorageError: not written; the copies keep their created_ms.
        """
        if not msgs:
            return 0
        wanted = {due_key(clamp_due(msg.due_ms), msg.id): msg for msg in msgs}
        ops: list[Op] = []  # filled by still_stored(); the commit adds its clock and floor to it
        rewritten = 0

        def still_stored() -> None:  # after the batches before it that write these keys: what they left
            nonlocal rewritten
            for key, msg in wanted.items():
                raw = self.kv.get(DUE_CF, key)
                try:
                    if raw is None or decode_message(raw) != msg:
                        continue
                except CorruptMessageError:
                    continue
                ops.append(Put(DUE_CF, key, encode_message(dataclasses.replace(msg, created_ms=created_ms))))
                rewritten += 1

        await self._commit_keys(list(wanted), ops, lambda _held, _synced: None, before=still_stored)
        return rewritten

    async def cancel(self, id_: str, *, remember_unknown: bool = False) -> CancelOutcome:
        """Cancel message ``id_``; waits for a publish of it in progress to finish first.

        Never answers CANCELLED for a message that was published, and a message this cancelled is
        never published. With ``remember_unknown``, a cancel of an id this store does not know still
        answers NOT_FOUND but leaves a CANCELLED marker (a tombstone, kept for the retention), so that a
        message arriving after its cancel (Rock-DMQ's inner topic can reorder them) is seen as cancelled.

        Raises:
            StorageError: the cancel was not stored; the message is still scheduled.
        """
        return await self._settle(id_, CANCELLED, remember_unknown)

    async def drop_published(self, id_: str) -> CancelOutcome:
        """Another replica published ``id_`` (Rock-DMQ's marks topic): drop this copy and remember it as
        SENT (with no ``sent_to``: not by us), also when unknown so a copy arriving later is a duplicate.
        CANCELLED: a copy was dropped; ALREADY_SENT: this store published it too (or knew it was);
        NOT_FOUND: unknown (the marker is left).

        Raises:
            StorageError: not stored; the copy is still scheduled.
        """
        return await self._settle(id_, SENT, True)

    async def drop_published_many(
        self, ids: Sequence[str], dues: Sequence[int | None] | None = None
    ) -> list[CancelOutcome]:
        """``drop_published`` of each id (one outcome each, in order), with one synced batch for the
        copies no publish holds now and one for the unknown ids' markers: a mark message carries up to
        500 ids, and a synced write per id cost about 3x what storing the copy did (bench.dmq_copies).
        An id whose copy a publish holds now waits for it alone, as in ``drop_published``.

        ``dues`` (parallel to ``ids``; None where unknown): the due time each id's copy was published
        at by the replica that marked it (v2 marks). The copy stored under that due is found by one
        point read of its index entry for the whole batch (KV.get_many) instead of an index scan per
        id (bench.dmq_drops); an id whose entry is not there (its copy not stored yet, stored under
        another due, already done) goes the scan way, so every outcome is the one a scan gives. A hit
        is taken as the id's only copy: a Rock-DMQ replica's intake stores an id once (a known id is a
        duplicate), so its store never holds two dues of one id.

        Raises:
            StorageError: not stored; the copies are still scheduled.
        """
        outcomes: dict[str, CancelOutcome] = {}
        free: list[bytes] = []
        unknown: list[str] = []
        busy: list[str] = []
        found = self._found_at(ids, dues) if dues is not None else {}
        unique = dict.fromkeys(ids)
        self.drop_lookups["point"] += len(found)
        self.drop_lookups["scan"] += len(unique) - len(found)
        # No await until _cancel_keys has taken the claims of ``free``: nothing can claim them between.
        for id_ in unique:
            hit = found.get(id_)
            keys = [hit] if hit is not None else [due_key(due, id_) for due in self._scheduled_dues(id_)]
            if any(key in self.queue.claims for key in keys):
                busy.append(id_)
            elif keys:
                free += keys
                outcomes[id_] = CancelOutcome.CANCELLED
            elif (done := self._done.get(id_)) is not None:
                sent = done[0] is DelayState.SENT
                outcomes[id_] = CancelOutcome.ALREADY_SENT if sent else CancelOutcome.CANCELLED
            else:
                unknown.append(id_)
                outcomes[id_] = CancelOutcome.NOT_FOUND
        # Lazy writes: no due copy waits for these, so they go after the "sent" records and schedules
        # queued, and ride on their WAL syncs (storage.group_commit); durable when this returns all the
        # same, so the marks consumer's offset never passes a drop that is not.
        if free:  # their markers without topics: 500 reads a mark, and the dmq process answers no status
            await self._cancel_keys(free, SENT, lazy=True, named=False)
        if unknown:
            now = self.now_ms()
            await self.writer.write(
                [op for id_ in unknown for op in DoneMarkers.ops(id_, SENT, now)], lazy=True
            )
        for id_ in busy:
            outcomes[id_] = await self._settle(id_, SENT, True)
        return [outcomes[id_] for id_ in ids]

    def _found_at(self, ids: Sequence[str], dues: Sequence[int | None]) -> dict[str, bytes]:
        """id -> its due key, for the ids whose index entry at the given due exists (one multi-get)."""
        asked: dict[str, int] = {}
        for id_, due in zip(ids, dues, strict=True):
            if due is not None and 0 <= due <= MAX_DUE_MS and id_ not in asked:
                asked[id_] = due
        if not asked:
            return {}
        entries = self.kv.get_many(INDEX_CF, [index_key(id_, due) for id_, due in asked.items()])
        return {
            id_: due_key(due, id_)
            for (id_, due), entry in zip(asked.items(), entries, strict=True)
            if entry is not None
        }

    async def _settle(self, id_: str, kind: bytes, remember_unknown: bool) -> CancelOutcome:
        """Finish ``id_`` as ``kind`` (cancel and drop_published), as cancel says."""
        sent = False
        while True:
            keys = [due_key(due, id_) for due in self._scheduled_dues(id_)]
            sent = sent or any(self.queue.claims.is_published(key) for key in keys)
            busy = next(
                (key for key in keys if key in self.queue.claims and not self.queue.claims.is_published(key)),
                None,
            )
            if busy is not None:
                sent = await self.queue.claims.wait(busy) or sent
                continue  # look again: it is gone (published) or back (the publish failed)
            free = [key for key in keys if key not in self.queue.claims]
            if free:
                await self._cancel_keys(free, kind)
                return CancelOutcome.ALREADY_SENT if sent else CancelOutcome.CANCELLED
            if sent:
                return CancelOutcome.ALREADY_SENT
            done = self._done.get(id_)
            if done is None:
                if remember_unknown:
                    now = self.now_ms()
                    await self.writer.write(list(DoneMarkers.ops(id_, kind, now)))
                return CancelOutcome.NOT_FOUND
            return CancelOutcome.ALREADY_SENT if done[0] is DelayState.SENT else CancelOutcome.CANCELLED

    async def _cancel_keys(
        self, keys: list[bytes], kind: bytes = CANCELLED, *, lazy: bool = False, named: bool = True
    ) -> None:
        """Finish the due ``keys`` as ``kind`` now; ``named``: their markers keep their messages' topics
        (read here: the claims taken first, nothing changes them before the batch is written)."""
        for key in keys:
            self.queue.claims.take(key)
        now = self.now_ms()
        ops = self._finish_ops(keys, kind, now, topics=self._topics(keys) if named else ())

        def written(held: bool, synced: bool) -> None:
            self.queue.claims.release(keys)
            if held:
                self._pending.add(-len(keys))
            if synced:
                for listener in list(self._removed):
                    listener(keys)
            else:
                self.queue.notify(min(keys))  # back in play: the scheduler must see them again

        await self._commit_keys(keys, ops, written, now=now, lazy=lazy)

    async def _commit_keys(
        self,
        keys: Sequence[bytes],
        ops: list[Op],
        then: Then,
        *,
        new_key: bytes | None = None,
        now: int | None = None,
        lazy: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        """``queue.commit`` of ``ops``, which write the due ``keys``, once no batch writing any of them is
        in flight (``_writing``); ``before()`` runs then, just before it is queued (its reads see every
        batch before it). Keys no batch writes cost one dict lookup each. ``then`` runs once, also
        ``then(False, False)`` when the wait or ``before`` fails (cancelled while waiting: nothing is
        left registered). Shielded: a caller cancelled while the batch syncs leaves it written all the
        same, its bookkeeping done and its keys let go once it is settled."""
        try:
            while busy := {ahead for key in keys if (ahead := self._writing.get(key)) is not None}:
                await asyncio.wait(busy)  # these gates are never cancelled, only set
            gate = asyncio.get_running_loop().create_future()
            for key in keys:
                self._writing[key] = gate
        except BaseException:
            then(False, False)
            raise
        try:
            if before is not None:
                before()
            commit = asyncio.ensure_future(self.queue.commit(ops, new_key, now, then, lazy=lazy))
        except BaseException:
            self._let_go(keys, gate)
            then(False, False)
            raise
        commit.add_done_callback(lambda _: self._let_go(keys, gate))
        await asyncio.shield(commit)

    def _let_go(self, keys: Sequence[bytes], gate: asyncio.Future[None]) -> None:
        for key in keys:
            if self._writing.get(key) is gate:
                del self._writing[key]
        gate.set_result(None)

    # --- the scheduler's side ---------------------------------------------------------------------
    def first_due(self, start: bytes = b"") -> bytes | None:
        return self.queue.first(start)

    async def mark_sent(
        self,
        keys: list[bytes],
        at_ms: int,
        sent_to: Sequence[StoredAt | None] = (),
        *,
        again: bool = False,
        topics: Sequence[str | None] = (),
    ) -> None:
        """The claimed messages under ``keys`` (to ``topics``, when given) were published (to ``sent_to``,
        when known): delete them and keep SENT markers (with their topics and due times), in one batch.
        Their claims are released once that is stored; until then cancel answers ALREADY_SENT.
        ``again``: a record the store refused before, written now; a spooled one's marker the replay has
        written since (where it went) is kept (the first record is not checked: the replay's first try
        comes seconds after the spool, so no marker read on the usual path).

        Raises:
            StorageError: not recorded; the claims stay, call again.
        """
        self.queue.claims.mark_published(keys)
        keep = self._sent_by_replay(keys, sent_to) if again else ()
        ops = self._finish_ops(keys, SENT, at_ms, sent_to, keep, topics)

        def written(held: bool, synced: bool) -> None:
            if synced:
                # Not when only the sync failed: the scheduler writes the mark again with the claims it
                # keeps (released, its retry would find them gone).
                self.queue.claims.release(keys)
            if held:
                counted = self._counted_out
                again = counted.intersection(keys) if counted else ()
                self._pending.add(len(again) - len(keys))
                if not synced:
                    counted.update(keys)
                elif again:
                    counted.difference_update(again)

        await self._commit_keys(keys, ops, written, now=at_ms)

    def due_value(self, key: bytes) -> bytes | None:
        """The message stored under due key ``key``; None once it was published, cancelled or dropped."""
        return self.kv.get(DUE_CF, key)

    @property
    def floor(self) -> bytes:
        """No live due key sorts below this (persisted: a restart starts seeking here)."""
        return self.queue.floor

    async def record_sent(self, ids: Sequence[str], sent_to: Sequence[StoredAt | None] = ()) -> None:
        """Mark messages delivered by another path (the retry store's replay) as SENT now, so their
        status and a late cancel answer as for a published delayed message, for the same retention.
        ``sent_to`` says where each was stored, when known. The topic and due time a marker of the id
        kept (a delayed message spooled when its publish failed) are kept.

        Raises:
            StorageError: not recorded.
        """
        now = self.now_ms()
        where = list(sent_to) or [None] * len(ids)
        ops: list[Op] = []
        for id_, to, done in zip(ids, where, self._done.get_many(list(ids)), strict=True):
            topic, due_ms = (None, None) if done is None else (done.topic, done.due_ms)
            ops += DoneMarkers.ops(id_, SENT, now, marker_detail(to, topic, due_ms))
        if ops:
            await self.writer.write(ops)

    # --- reads and housekeeping ----------------------------------------------------------------------
    def get(self, id_: str) -> DelayStatus | None:
        """SCHEDULED (due time, topic), SENT or CANCELLED (when), or None if unknown or purged."""
        dues = self._scheduled_dues(id_)
        if dues:
            due = min(dues)
            raw = self.kv.get(DUE_CF, due_key(due, id_))
            try:
                topic = decode_message(raw).topic if raw is not None else None
            except CorruptMessageError:
                topic = None
            return DelayStatus(id_, DelayState.SCHEDULED, due_ms=due, topic=topic)
        done = self._done.get(id_)
        if done is None:
            return None
        return DelayStatus(
            id_, done.state, due_ms=done.due_ms, at_ms=done.at_ms, topic=done.topic, sent_to=done.sent_to
        )

    def stats(self) -> DelayStats:
        first = self.first_due(self.floor)
        try:
            next_due = parse_due(first) if first is not None else None
        except ValueError:
            next_due = None
        return DelayStats(self.pending_count, next_due, self.writer.healthy, self.writer.last_error)

    async def purge(self, limit: int = PURGE_LIMIT) -> int:
        """Drop up to ``limit`` done markers older than the retention; returns how many expired."""
        return await self._done.purge(self.now_ms(), limit)

    def _scheduled_dues(self, id_: str) -> list[int]:
        prefix = index_prefix(id_)
        entries = self.kv.scan(INDEX_CF, lower=prefix, upper=prefix[:-1] + b"\x01")
        return index_dues(id_, [key for key, _ in entries])

    @staticmethod
    def _finish_ops(
        keys: list[bytes],
        kind: bytes,
        at_ms: int,
        sent_to: Sequence[StoredAt | None] = (),
        keep: Container[int] = (),
        topics: Sequence[str | None] = (),
    ) -> list[Op]:
        """Delete the due keys and their index entries; mark their ids done (``kind`` at ``at_ms``, sent
        to ``sent_to[i]`` when given, with their due times and ``topics[i]`` when given), but for the
        indexes in ``keep`` (their marker stays as it is)."""
        ops: list[Op] = []
        for i, key in enumerate(keys):
            due_ms, id_ = split_due_key(key)
            ops += (Delete(DUE_CF, key), Delete(INDEX_CF, index_key(id_, due_ms)))
            if i not in keep:
                to = sent_to[i] if i < len(sent_to) else None
                topic = topics[i] if i < len(topics) else None
                ops += DoneMarkers.ops(id_, kind, at_ms, marker_detail(to, topic, due_ms))
        return ops

    def _topics(self, keys: list[bytes]) -> list[str | None]:
        """The topic of the message stored under each due key (None: gone, or unreadable)."""
        topics: list[str | None] = []
        for raw in self.kv.get_many(DUE_CF, keys):
            try:
                topics.append(decode_message(raw).topic if raw is not None else None)
            except CorruptMessageError:
                topics.append(None)
        return topics

    def _sent_by_replay(self, keys: list[bytes], sent_to: Sequence[StoredAt | None]) -> set[int]:
        """Indexes of ``keys`` recorded without a "where" (spooled) whose marker already says where the
        retry store's replay sent them (record_sent): a spooled message's record refused once and written
        again later must not put back "sent at the spool, nowhere" over it."""
        found: set[int] = set()
        for i, key in enumerate(keys):
            if i < len(sent_to) and sent_to[i] is not None:
                continue
            done = self._done.get(split_due_key(key)[1])
            if done is not None and done[0] is DelayState.SENT and done[2] is not None:
                found.add(i)
        return found
