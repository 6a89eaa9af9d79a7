"""RetryStore: the durable spool of messages waiting for redelivery, over a KV and a group-commit writer.

Column families: ``retry_pending`` (keys in due-time order, see retry.keys), ``retry_index`` (id ->
where the message is), ``retry_dead`` (dead letters), ``retry_meta`` (see storage.progress), and the
lanes that keep a sharding key's messages in their order: ``retry_lanes`` and ``retry_waiting``
(retry.lanes). Every state change is one atomic batch, and no method returns before its batch is synced.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.due_queue import DueQueue, QueueBacked, Then
from rocksidecar.storage.errors import UnsyncedError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.key_count import KeyCount
from rocksidecar.storage.keys import clamp_due
from rocksidecar.storage.kv import KV, Delete, Op, Put

from .dead_letter import DeadLetter, decode_dead, encode_dead
from .dead_letters import DeadLetters
from .keys import (
    COLUMN_FAMILIES,
    DEAD,
    DEAD_CF,
    INDEX_CF,
    LANES_CF,
    META_CF,
    PENDING,
    PENDING_CF,
    WAITING,
    WAITING_CF,
    dead_key,
    decode_lane,
    id_of,
    index_key,
    index_prefix,
    lane_key,
    parse_pending_key,
    pending_key,
    pending_of_dead,
    split_index_key,
    split_waiting_key,
)
from .lanes import Held, LaneBatch, LaneLocks, free_pending_key, lane_headed_by, lane_of
from .oldest import SYNC_SCAN_LIMIT, OldestPending, since_ms, since_of
from .record import CorruptRecordError, RetryRecord, decode_record, encode_record
from .status import MessageStatus, State, StoreStats

log = logging.getLogger(__name__)


DeadLetterHook = Callable[[DeadLetter], Awaitable[None] | None]


class RetryStore(QueueBacked):
    """Spool, reschedule, acknowledge and dead-letter messages; answer where a message stands.

    Counts are kept in memory from a key count at open (storage.key_count: in the background for
    large stores), changed by what each batch the store holds adds and removes, synced or not (a batch
    whose WAL sync failed after its apply is in the store: storage.errors.UnsyncedError); they stay
    exact unless the same message is spooled twice with the same due
    millisecond (then one key is overwritten and counted twice): what may spool a message again
    uses ``spool_new``.

    The oldest pending message's first failure (``stats``) is kept in memory too (retry.oldest), built
    at open from one scan of the pending records (in the background for a large store) and told every
    record written or deleted here.

    A message with a sharding key belongs to its lane (retry.lanes): pending when it is the lane's head,
    else waiting behind it. ``pending_count`` and the oldest count waiting messages too; ``lanes_open``
    is how many lanes have one message or more (counted from when the batch opening one is queued).
    """

    def __init__(
        self,
        kv: KV,
        *,
        now_ms: Callable[[], int] = wall_ms,
        clock: Callable[[], float] = time.monotonic,
        on_dead_letter: DeadLetterHook | None = None,
        writer: GroupCommitWriter | None = None,
        owns_kv: bool = False,
    ) -> None:
        shared = writer or GroupCommitWriter(kv)  # pass one to share its batches and syncs
        # Pending keys are claimed by the replay (its in-flight keys).
        super().__init__(
            DueQueue(kv, shared, PENDING_CF, META_CF, "retry store's", now_ms=now_ms, clock=clock)
        )
        self._owns_writer = writer is None
        self._owns_kv = owns_kv
        self._on_dead_letter = on_dead_letter
        self.dead = DeadLetters(kv, self.redrive)
        self._dead = KeyCount(kv, DEAD_CF)  # counted as the pending keys are (storage.key_count)
        # Dead keys a redrive or purge is removing now: between its read and its batch's commit the
        # letter is still in the KV, and a second call must not find it and move or count it again.
        # (Pending keys a purge removes are claimed in the queue instead: the replay must not take them.)
        self._leaving: set[bytes] = set()
        # Pending keys a redrive is writing now: a second redrive of the same message in the same
        # millisecond (redrive_id runs them together) must not write, and count, the same key again.
        self._arriving: set[bytes] = set()
        # The lanes: messages waiting behind their key's head, and how many lanes hold any (the send
        # path asks the KV about a key's lane only while this is above 0).
        self._waiting = KeyCount(kv, WAITING_CF)
        self._lanes = KeyCount(kv, LANES_CF)
        self._lane_locks = LaneLocks()
        self._oldest = OldestPending()
        values = (raw for cf in (PENDING_CF, WAITING_CF) for _, raw in kv.iterate(cf))
        if self._pending.exact and self._waiting.exact and self.pending_count <= SYNC_SCAN_LIMIT:
            self._oldest.load(values)
        else:
            self._oldest.load_in_background(values)

    @property
    def pending_count(self) -> int:
        """Messages not delivered yet: pending, and waiting behind their lane's head."""
        return self._pending.value + self._waiting.value

    @property
    def lanes_open(self) -> int:
        """Lanes (a topic's sharding key) with a message in the store, or opened by a batch being written;
        0: no lane is open (nothing to ask)."""
        return self._lanes.value

    def lane_head_due(self, topic: str, sharding_key: str) -> int | None:
        """When the head of ``topic``'s ``sharding_key`` lane is due, or None when the lane has no message
        here: a message of that key sent now would be stored before the ones spooled earlier. Costs one
        integer test while no lane is open."""
        return self._head_due(lane_key(topic, sharding_key)) if self._lanes.value else None

    def _head_due(self, lane: bytes) -> int | None:
        """When ``lane``'s head is due (now, for an entry that does not decode); None: no entry."""
        raw = self.kv.get(LANES_CF, lane)
        if raw is None:
            return None
        try:
            return parse_pending_key(decode_lane(raw).head).due_ms
        except ValueError:
            return self.now_ms()

    @property
    def dead_count(self) -> int:
        return self._dead.value

    def wait_counted(self, timeout_s: float | None = None) -> bool:
        """Wait for the exact counts behind pending_count and dead_count (tests); whether they are done."""
        counts = (self._pending, self._waiting, self._lanes, self._dead, self._oldest)
        return all(count.wait(timeout_s) for count in counts)

    @classmethod
    def open(cls, path: str | Path, **kwargs: object) -> RetryStore:
        """Open (or create) the RocksDB store at ``path``; raises storage.errors.StoreLockedError
        when another process has it open."""
        from rocksidecar.storage.rocks import RocksKV

        kv = RocksKV.open(path, COLUMN_FAMILIES)
        try:
            return cls(kv, owns_kv=True, **kwargs)  # type: ignore[arg-type]
        except BaseException:
            kv.close()
            raise

    async def close(self) -> None:
        """Write the floor one last time (a clean restart seeks from the exact floor), then close the
        writer and the KV if this store created them."""
        for count in (self._pending, self._waiting, self._lanes, self._dead, self._oldest):
            count.close()
        await self.queue.save()
        if self._owns_writer:
            await self.writer.close()
        if self._owns_kv:
            self.kv.close()

    async def probe(self) -> None:
        """One small synced write (the floor): whether acks can be written again.

        Raises:
            StorageError: the store still fails writes.
        """
        await self.queue.probe()

    # --- state changes ------------------------------------------------------------------------
    async def spool(self, record: RetryRecord, due_ms: int | None = None) -> bytes:
        """Store ``record`` durably, due at ``due_ms`` (default: now). Returns its key.

        Raises:
            StorageError: not stored; the caller must not acknowledge the message.
        """
        return (await self.spool_many((record,), due_ms))[0]

    async def spool_many(self, records: Sequence[RetryRecord], due_ms: int | None = None) -> list[bytes]:
        """Store several records in one batch (all or none), all due at ``due_ms`` (default: now).

        One call per request batch costs one await instead of one per message (see bench/RESULTS.md).

        Raises:
            StorageError: none of them is stored.
        """
        now = self.now_ms()
        due = clamp_due(now if due_ms is None else due_ms)
        keys: list[bytes] = []
        ops: list[Op] = []
        for record in records:
            if record.sharding_key:  # a lane's: its head, or behind it (an unkeyed batch pays this test)
                return await self._spool_in_lanes(records, due, now)
            key = pending_key(due, record.retry_count, record.type, record.id)
            keys.append(key)
            ops.append(Put(PENDING_CF, key, encode_record(record)))
            ops.append(Put(INDEX_CF, index_key(record.id, PENDING, key), b""))
        if keys:

            def written(held: bool, synced: bool) -> None:
                if held:
                    self._pending.add(len(keys))
                    for record in records:
                        self._oldest.add(since_ms(record))

            await self._commit(ops, min(keys), now, written)
        return keys

    async def _spool_in_lanes(self, records: Sequence[RetryRecord], due: int, now: int) -> list[bytes]:
        """spool_many of records some of which have a lane: each, in the order given, is its lane's head
        (pending, due at ``due``) when the lane has no message here, else it waits at the lane's tail."""
        held = await self._lane_locks.acquire(lane for r in records if (lane := lane_of(r)) is not None)
        keys: list[bytes] = []
        heads: list[bytes] = []
        try:
            batch = LaneBatch(self.kv, now)
            for record in records:
                lane = lane_of(record)
                key = None if lane is None else batch.behind(lane, record)
                if key is None:
                    key = pending_key(due, record.retry_count, record.type, record.id)
                    batch.put_pending(key, record)
                    heads.append(key)
                    if lane is not None:
                        batch.open(lane, key)
                keys.append(key)
            ops = batch.finish()
        except BaseException:
            held.release()
            raise
        added = [since_ms(record) for record in records]
        await self._commit(ops, min(heads) if heads else None, now, self._lanes_written(held, batch, added))
        return keys

    def _lanes_written(
        self, held: Held | None, batch: LaneBatch, added: Iterable[int] = (), removed: Iterable[int] = ()
    ) -> Then:
        """The bookkeeping of a batch that changed lanes: the locks let go once it is settled (written or
        not), the counts and the oldest told what it added and removed once the store holds it, the
        keys it promoted given up by ``_arriving``. The lanes it opens are counted now, before it can be
        applied (and uncounted if it is not written): a lane readable in the store is always counted, so
        a purge that finds no lane open (``_purgeable``) cannot take a head whose entry is being written,
        and leave that entry naming a head gone (its lane stuck for good)."""
        self._arriving.update(batch.promoted)
        opening = max(batch.opened, 0)
        self._lanes.add(opening)

        def written(stored: bool, synced: bool) -> None:
            self._arriving.difference_update(batch.promoted)
            if held is not None:
                held.release()
            self._lanes.add(batch.opened - opening if stored else -opening)
            if stored:
                self._pending.add(batch.pending)
                self._waiting.add(batch.waiting)
                self._dead.add(batch.dead)
                for since in added:
                    self._oldest.add(since)
                for since in (*removed, *batch.removed):
                    self._oldest.remove(since)

        return written

    async def spool_new(self, record: RetryRecord, due_ms: int | None = None) -> bytes | None:
        """``spool`` unless the store holds the message already (pending on any rung, or dead, by its
        id): for a message that may have been spooled before, by a process that died before it could
        record that (a transaction's commit carried out again). None when it was there. Not a second
        copy of it (delivered twice, counted twice): a rewrite under the same key was counted again,
        one under a later rung's key was a second row. The caller spools a given message one call at
        a time (two such calls at once would both find it absent)."""
        if self.get(record.id) is not None:
            return None
        return await self.spool(record, due_ms)

    async def reschedule(
        self, old_key: bytes, record: RetryRecord, due_ms: int, *, was: RetryRecord | None = None
    ) -> bytes:
        """Write ``record`` under its next rung and delete ``old_key``, in one batch. ``was``: the record
        under ``old_key`` when the caller has it (else it is read here)."""
        old_since = since_ms(was) if was is not None else self._since_at(old_key)
        key = pending_key(clamp_due(due_ms), record.retry_count, record.type, record.id)
        ops: list[Op] = [
            Put(PENDING_CF, key, encode_record(record)),
            Put(INDEX_CF, index_key(record.id, PENDING, key), b""),
        ]
        if key != old_key:
            ops += self._unlink(old_key)
        new_since = since_ms(record)
        lane = lane_of(record)
        if lane is not None:  # the head's new key goes into its lane's entry, in the same batch
            await self._commit_in_lanes(
                [lane], ops, key, lambda batch: batch.moved(lane, old_key, key), added=(new_since,),
                removed=(old_since,),
            )  # fmt: skip
            return key

        def written(held: bool, synced: bool) -> None:
            if held and new_since != old_since:  # the same (the usual): nothing changes there
                self._oldest.remove(old_since)
                self._oldest.add(new_since)

        await self._commit(ops, key, None, written)
        return key

    async def ack(self, key: bytes) -> None:
        """The message under ``key`` was delivered: delete it and its index entry."""
        await self.ack_many((key,))

    async def ack_many(self, keys: Sequence[bytes], records: Sequence[RetryRecord] | None = None) -> None:
        """Several delivered messages, deleted in one batch. ``records``: the records under ``keys``, in
        order, when the caller has them (else they are read here)."""
        if records is None:
            records_or_none = [self._record_at(k) for k in keys]
            sinces = [0 if r is None else since_ms(r) for r in records_or_none]
            lanes = [None if r is None else lane_of(r) for r in records_or_none]
        else:
            sinces = [since_ms(r) for r in records]
            lanes = [lane_of(r) for r in records] if any(r.sharding_key for r in records) else []
        if any(lanes):  # a head that leaves lets the next of its lane go
            # Those without a lane first, in a batch of their own: under the lanes' locks their ack would
            # wait for every spool queued on those lanes (one lane's intake holding up other messages).
            free: list[tuple[bytes, int]] = []
            laned: list[tuple[bytes, int, bytes]] = []
            for key, since, lane in zip(keys, sinces, lanes, strict=True):
                if lane is None:
                    free.append((key, since))
                else:
                    laned.append((key, since, lane))
            if free:
                await self._ack_free([key for key, _ in free], [since for _, since in free])

            def leave(batch: LaneBatch) -> None:
                for key, _, lane in laned:
                    batch.left(lane, key)

            ops = [op for key, _, _ in laned for op in self._unlink(key)]
            await self._commit_in_lanes(
                [lane for _, _, lane in laned], ops, None, leave, pending=-len(laned),
                removed=[since for _, since, _ in laned],
            )  # fmt: skip
            return
        await self._ack_free(keys, sinces)

    async def _ack_free(self, keys: Sequence[bytes], sinces: Sequence[int]) -> None:
        """ack_many of records without a lane (``sinces``: their since_ms), in one batch, no lock."""
        ops = [op for key in keys for op in self._unlink(key)]

        def written(held: bool, synced: bool) -> None:
            if held:
                self._pending.add(-len(keys))
                for since in sinces:
                    self._oldest.remove(since)

        await self._commit(ops, None, None, written)

    async def bury(
        self, key: bytes, record: RetryRecord, reason: str, *, was: RetryRecord | None = None
    ) -> bytes:
        """Move the message under ``key`` to the dead letters, with its history and ``reason``. ``was``:
        the record under ``key`` when the caller has it (else it is read here)."""
        since = since_ms(was) if was is not None else None
        return await self.quarantine(key, encode_record(record), reason, _since=since, _lane=lane_of(record))

    async def quarantine(
        self, key: bytes, raw: bytes, reason: str, *, _since: int | None = None, _lane: bytes | None = b""
    ) -> bytes:
        """Move the stored bytes under ``key`` (decodable or not) to the dead letters. A lane's head that
        dies lets the next of its lane go (as Java's orderly consumer does after its retries)."""
        since = self._since_at(key) if _since is None else _since
        lane = self._lane_at(key, raw) if _lane == b"" else _lane  # b"": not told (bury tells)
        held = None if lane is None else await self._lane_locks.acquire([lane])
        try:
            now = self.now_ms()
            dkey = dead_key(now, key)
            value = encode_dead(reason, now, raw)
            ops: list[Op] = [Put(DEAD_CF, dkey, value), *self._unlink(key)]
            id_ = id_of(key)
            if id_ is not None:
                ops.append(Put(INDEX_CF, index_key(id_, DEAD, dkey), b""))
            batch = LaneBatch(self.kv, now, self._arriving)
            if lane is not None:
                batch.left(lane, key)
                ops += batch.finish()
        except BaseException:
            if held is not None:
                held.release()
            raise
        batch.pending -= 1
        lanes_written = self._lanes_written(held, batch, removed=(since,))

        def written(stored: bool, synced: bool) -> None:
            lanes_written(stored, synced)
            if stored:
                self._dead.add(1)

        try:
            await self._commit(ops, min(batch.promoted, default=None), now, written)
        except UnsyncedError:
            # Buried all the same (only its WAL sync failed): no longer pending, nothing buries it again,
            # so the hook (the dead-letter metric, the webhook) hears of it now or never.
            await self._notify_dead(decode_dead(dkey, value))
            raise
        await self._notify_dead(decode_dead(dkey, value))
        return dkey

    async def redrive(self, dkey: bytes) -> bytes:
        """Move one dead letter back to pending, retry count reset, due now. Returns its new key. One of a
        sharding key whose lane holds messages joins the lane's tail instead (its waiting key).

        Raises:
            KeyError: no dead letter under ``dkey``, or another call is moving it now.
            CorruptRecordError: the dead letter holds bytes that are not a record.
        """
        # No await between this check and the claim below: two calls at once (a double click, the CLI
        # and the page) cannot both pass it. A claim, not a lock: re-drives of different letters still
        # share group commits.
        data = None if dkey in self._leaving else self.kv.get(DEAD_CF, dkey)
        if data is None:
            raise KeyError(dkey)
        letter = decode_dead(dkey, data)
        if letter.record is None:
            raise CorruptRecordError(f"dead letter {dkey!r} is not a record: {letter.reason}")
        record = replace(letter.record, retry_count=0)
        lane = lane_of(record)
        if lane is not None:
            return await self._redrive_in_lane(dkey, record, lane)
        key = self._free_pending_key(record)
        ops: list[Op] = [
            Put(PENDING_CF, key, encode_record(record)),
            Put(INDEX_CF, index_key(record.id, PENDING, key), b""),
            *_unlink_dead(dkey),
        ]
        self._leaving.add(dkey)
        self._arriving.add(key)

        def written(held: bool, synced: bool) -> None:
            # Released written or not, as before: once the batch is settled the KV tells (gone, or still
            # there to retry); a second redrive of a letter the store no longer holds finds no letter.
            self._leaving.discard(dkey)
            self._arriving.discard(key)
            if held:
                self._pending.add(1)
                self._oldest.add(since_ms(record))
                self._dead.add(-1)

        await self._commit(ops, key, None, written)
        return key

    async def _redrive_in_lane(self, dkey: bytes, record: RetryRecord, lane: bytes) -> bytes:
        """redrive of a letter that has a lane: its head (pending, due now) when the lane holds nothing,
        else at its tail. The letter is claimed (``_leaving``) before the lane's lock is awaited."""
        drop = _unlink_dead(dkey)
        self._leaving.add(dkey)
        try:
            held = await self._lane_locks.acquire([lane])
        except BaseException:
            self._leaving.discard(dkey)
            raise
        try:
            now = self.now_ms()
            batch = LaneBatch(self.kv, now, self._arriving)
            key = batch.behind(lane, record)
            if key is None:
                key = self._free_pending_key(record)
                batch.put_pending(key, record)
                batch.open(lane, key)
                self._arriving.add(key)
            ops = [*batch.finish(), *drop]
        except BaseException:
            held.release()
            self._leaving.discard(dkey)
            raise
        lanes_written = self._lanes_written(held, batch, added=(since_ms(record),))

        def written(stored: bool, synced: bool) -> None:
            self._leaving.discard(dkey)
            self._arriving.discard(key)
            lanes_written(stored, synced)
            if stored:
                self._dead.add(-1)

        await self._commit(ops, key if batch.pending else None, now, written)
        return key

    async def _commit_in_lanes(
        self,
        lanes: Iterable[bytes],
        ops: list[Op],
        new_key: bytes | None,
        decide: Callable[[LaneBatch], None],
        *,
        pending: int = 0,
        added: Iterable[int] = (),
        removed: Iterable[int] = (),
    ) -> None:
        """Write ``ops`` (which change ``pending`` pending keys, add records since ``added`` and remove
        records since ``removed``) with what ``decide`` makes of ``lanes`` under their locks, in one batch.
        ``new_key``: the smallest pending key ``ops`` add, if any."""
        held = await self._lane_locks.acquire(lanes)
        try:
            now = self.now_ms()
            batch = LaneBatch(self.kv, now, self._arriving)
            decide(batch)
            batch.pending += pending
            ops = [*ops, *batch.finish()]
        except BaseException:
            held.release()
            raise
        new = min((k for k in (new_key, *batch.promoted) if k is not None), default=None)
        await self._commit(ops, new, now, self._lanes_written(held, batch, added, removed))

    def _record_at(self, key: bytes) -> RetryRecord | None:
        """The record under pending ``key`` (None: none there, or undecodable)."""
        raw = self.kv.get(PENDING_CF, key)
        if raw is None:
            return None
        try:
            return decode_record(raw)
        except CorruptRecordError:
            return None

    def _lane_at(self, key: bytes, raw: bytes) -> bytes | None:
        """The lane of the record under pending ``key`` whose value is ``raw``; for one that does not
        decode, the lane it heads (a read of every lane entry, while any is open), if any."""
        try:
            return lane_of(decode_record(raw))
        except CorruptRecordError:
            return lane_headed_by(self.kv, key) if self._lanes.value else None

    def _free_pending_key(self, record: RetryRecord) -> bytes:
        """A pending key for ``record`` due now (retry count 0) that holds nothing and that no other
        redrive is writing (retry.lanes.free_pending_key)."""
        return free_pending_key(
            self.kv, self.now_ms(), 0, record.type, record.id, self._arriving.__contains__
        )

    async def purge(
        self,
        pending: Sequence[bytes] = (),
        dead: Sequence[bytes] = (),
        *,
        waiting: Sequence[bytes] = (),
        also: Sequence[Op] = (),
    ) -> int:
        """Delete pending, waiting and dead keys for good (the admin's purge), in one batch; returns how
        many it deleted. A pending key that is claimed (a replay has it in flight, another purge is
        deleting it) is left to its owner, not deleted or counted here. A lane's head that goes lets the
        next of its lane go (due now); a waiting message that goes leaves its lane as it was. ``also``: the
        caller's ops, written in the same batch when every pending and waiting key given is deleted by it
        (else not written).

        Raises:
            StorageError: nothing was deleted.
        """
        claims = self.queue.claims
        # No await between these reads and the claims taken below: the seek loop, a replay-now and a
        # second purge cannot take a key between. Claimed, a key that falls due while this batch waits
        # for its sync is not handed to a worker (whose reschedule would write it back, uncounted, or
        # whose ack would count it down a second time), and the floor stays below it.
        asked = dict.fromkeys(pending)
        pending, sinces, lanes = self._purgeable(asked)
        # one a redrive or another purge is removing now is theirs (see redrive)
        dead = [
            k for k in dict.fromkeys(dead) if k not in self._leaving and self.kv.get(DEAD_CF, k) is not None
        ]
        asked_waiting = _lanes_of_waiting(waiting)
        ops: list[Op] = [op for key in pending for op in self._unlink(key)]
        ops += [op for dkey in dead for op in _unlink_dead(dkey)]
        if not ops and not asked_waiting:
            return 0
        for key in pending:
            claims.take(key)
        self._leaving.update(dead)

        def let_go() -> None:
            claims.release(pending)
            self._leaving.difference_update(dead)

        involved = {lane for lane in lanes if lane is not None} | set(asked_waiting.values())
        held = None
        try:
            # The lanes' decisions (who heads a lane, which waiting ones are still there) are made under
            # their locks: another call's batch changing them lands first.
            held = await self._lane_locks.acquire(involved) if involved else None
            now = self.now_ms()
            batch = LaneBatch(self.kv, now, self._arriving)
            gone = self._unlink_waiting(asked_waiting, ops, sinces)
            batch.waiting -= len(gone)
            batch.pending -= len(pending)
            for key, lane in zip(pending, lanes, strict=False):  # lanes: empty while none is open
                if lane is not None:
                    batch.left(lane, key, gone)
            ops += batch.finish()
        except BaseException:
            if held is not None:
                held.release()
            let_go()
            raise
        if not ops:
            if held is not None:
                held.release()
            let_go()
            return 0
        if also and len(pending) == len(asked) and len(gone) == len(asked_waiting):
            ops.extend(also)
        lanes_written = self._lanes_written(held, batch, removed=sinces)

        def written(stored: bool, synced: bool) -> None:
            let_go()
            lanes_written(stored, synced)
            if stored:
                self._dead.add(-len(dead))
            if not synced and pending:
                # Still stored (unless only the sync failed: then it finds them gone), and the seek
                # loop may have passed them while they were claimed: it must read them again.
                self.queue.notify(min(pending))

        # Shielded (_commit): a caller cancelled while the batch syncs must not leave the keys claimed
        # either (never replayed until a restart).
        await self._commit(ops, min(batch.promoted, default=None), now, written)
        return len(pending) + len(gone) + len(dead)

    def _purgeable(self, asked: Iterable[bytes]) -> tuple[list[bytes], list[int], list[bytes | None]]:
        """Of the pending keys ``asked``, those a purge deletes (held, not claimed), each one's since_ms
        (not its value: kept until the commit, the values of a batch of a thousand were every body at
        once) and the lane it may head (none while no lane is open: a key read now cannot become a head
        later, heads are written as such, and a lane is counted before its head is readable)."""
        claims = self.queue.claims
        in_lanes = self._lanes.value > 0
        pending: list[bytes] = []
        sinces: list[int] = []
        lanes: list[bytes | None] = []
        for k in asked:
            if k not in claims and (raw := self.kv.get(PENDING_CF, k)) is not None:
                pending.append(k)
                sinces.append(since_of(raw))
                if in_lanes:
                    lanes.append(self._lane_at(k, raw))
        return pending, sinces, lanes

    def _unlink_waiting(self, keys: Iterable[bytes], ops: list[Op], sinces: list[int]) -> set[bytes]:
        """Add to ``ops`` the deletes of the waiting ``keys`` still held (and to ``sinces`` theirs); which."""
        gone: set[bytes] = set()
        for key in keys:
            if (raw := self.kv.get(WAITING_CF, key)) is not None:
                ops.append(Delete(WAITING_CF, key))
                ops.append(Delete(INDEX_CF, index_key(split_waiting_key(key)[2], WAITING, key)))
                sinces.append(since_of(raw))
                gone.add(key)
        return gone

    def _since_at(self, key: bytes) -> int:
        """``since_ms`` of the record stored under pending ``key`` (0: none there, or undecodable)."""
        raw = self.kv.get(PENDING_CF, key)
        return 0 if raw is None else since_of(raw)

    def _unlink(self, key: bytes) -> list[Op]:
        ops: list[Op] = [Delete(PENDING_CF, key)]
        id_ = id_of(key)
        if id_ is not None:
            ops.append(Delete(INDEX_CF, index_key(id_, PENDING, key)))
        return ops

    async def _commit(self, ops: list[Op], new_key: bytes | None, now: int | None, then: Then) -> None:
        """Write ``ops`` durably; ``new_key`` is the smallest pending key they add, if any; ``then(held,
        synced)`` the counts' bookkeeping (storage.due_queue.Then). Shielded: a caller cancelled while the
        batch syncs (a gRPC client gone) leaves a batch that is written all the same, and its counts must
        follow it (done after the await, they were skipped: a record stored and never counted)."""
        await asyncio.shield(self.queue.commit(ops, new_key, now, then))

    async def _notify_dead(self, letter: DeadLetter) -> None:
        if self._on_dead_letter is None:
            return
        try:
            result = self._on_dead_letter(letter)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("on_dead_letter hook failed for %s (the dead letter is stored)", letter.id)

    # --- reads --------------------------------------------------------------------------------
    def first_pending(self, start: bytes = b"") -> bytes | None:
        return self.queue.first(start)

    @property
    def floor(self) -> bytes:
        """No live pending key sorts below this (persisted: a restart starts seeking here)."""
        return self.queue.floor

    async def withdraw(self, id_: str, also: Sequence[Op] = ()) -> bool:
        """Delete message ``id_``'s pending records; True when every one was deleted here, so none can be
        replayed (False: none was pending, or a replay had one in flight and may be sending it). For a
        message its sender takes back before it was ever sent: a Rock-DMQ cancel of an inner message
        spooled here. ``also`` (the caller's record that it was taken back) is written in the same
        batch when True is answered, never otherwise: the two cannot disagree after a failed write.

        Raises:
            StorageError: nothing was deleted or written.
        """
        entries = self._indexed(id_)
        keys = [key for state, key in entries if state == PENDING]
        waiting = [key for state, key in entries if state == WAITING]
        asked = len(keys) + len(waiting)
        return bool(asked) and await self.purge(pending=keys, waiting=waiting, also=also) == asked

    def _indexed(self, id_: str) -> list[tuple[bytes, bytes]]:
        """Message ``id_``'s (state, key) entries of the id index: its pending, waiting and dead keys."""
        prefix = index_prefix(id_)
        return [
            split_index_key(k) for k, _ in self.kv.scan(INDEX_CF, lower=prefix, upper=prefix[:-1] + b"\x01")
        ]

    def get(self, id_: str) -> MessageStatus | None:
        """Where message ``id_`` stands: SPOOLED (next attempt, attempts) or DEAD (reason), or None. One
        waiting behind its lane's head is SPOOLED, next attempt its head's."""
        entries = self._indexed(id_)
        for _, key in sorted(e for e in entries if e[0] == PENDING):
            raw = self.kv.get(PENDING_CF, key)
            if raw is not None:
                parsed = parse_pending_key(key)
                return self._pending_status(id_, key, raw, parsed.due_ms, parsed.retry_count)
        for _, key in sorted(e for e in entries if e[0] == WAITING):
            raw = self.kv.get(WAITING_CF, key)
            if raw is not None:
                return self._pending_status(id_, key, raw, self.waiting_due(key), 0)
        for _, key in sorted((e for e in entries if e[0] == DEAD), reverse=True):
            raw = self.kv.get(DEAD_CF, key)
            if raw is not None:
                letter = decode_dead(key, raw)
                record = letter.record
                return MessageStatus(
                    id_,
                    State.DEAD,
                    key,
                    record.failed_attempts if record else 0,
                    record.last_error if record else "",
                    topic=record.topic if record else None,
                    reason=letter.reason,
                    dead_at_ms=letter.dead_at_ms,
                )
        return None

    @staticmethod
    def _pending_status(id_: str, key: bytes, raw: bytes, due_ms: int, retry_count: int) -> MessageStatus:
        try:
            record = decode_record(raw)
        except CorruptRecordError as exc:
            # what the key alone tells: the count and due time live there, the topic does not
            attempts, last_error, topic = retry_count, f"corrupt value: {exc}", None
        else:
            attempts, last_error, topic = record.failed_attempts, record.last_error, record.topic
        return MessageStatus(
            id_, State.SPOOLED, key, attempts, last_error, topic=topic, next_attempt_at_ms=due_ms
        )

    def waiting_due(self, key: bytes) -> int:
        """When the message under waiting ``key`` may go next: its lane's head's due time (it goes right
        after the head leaves); now, should its lane have no entry."""
        try:
            due = self._head_due(split_waiting_key(key)[0])
        except ValueError:
            due = None
        return self.now_ms() if due is None else due

    def spooled(self, key: bytes) -> tuple[bytes, int] | None:
        """(stored value, next attempt time) of a pending or waiting ``key``, or None when neither holds it
        (the CLI's inspect by key)."""
        raw = self.kv.get(PENDING_CF, key)
        if raw is not None:
            try:
                return raw, parse_pending_key(key).due_ms
            except ValueError:
                return None
        raw = self.kv.get(WAITING_CF, key)
        return None if raw is None else (raw, self.waiting_due(key))

    def pending_record(self, key: bytes) -> RetryRecord | None:
        """The record under a pending or waiting key; raises CorruptRecordError for undecodable bytes."""
        raw = self.kv.get(PENDING_CF, key)
        if raw is None:
            raw = self.kv.get(WAITING_CF, key)
        return None if raw is None else decode_record(raw)

    def stats(self) -> StoreStats:
        first = self.first_pending(self.queue.floor)
        oldest_due = None if first is None else parse_pending_key(first).due_ms
        first_failure = self._oldest.oldest()
        if not self._oldest.exact and first is not None:
            # A large store's open scan is still running: what the changes since the open and the next
            # message due tell, the older of the two (never older than the truth).
            since = self._since_at(first)
            if since and (first_failure is None or since < first_failure):
                first_failure = since
        return StoreStats(
            self.pending_count,
            self.dead_count,
            oldest_due,
            first_failure,
            self.healthy,
            self.writer.last_error,
        )


def _unlink_dead(dkey: bytes) -> list[Op]:
    ops: list[Op] = [Delete(DEAD_CF, dkey)]
    old_id = id_of(pending_of_dead(dkey))
    if old_id is not None:
        ops.append(Delete(INDEX_CF, index_key(old_id, DEAD, dkey)))
    return ops


def _lanes_of_waiting(keys: Iterable[bytes]) -> dict[bytes, bytes]:
    """waiting key -> its lane, for each of ``keys`` that is a waiting key (another holds nothing)."""
    lanes: dict[bytes, bytes] = {}
    for key in keys:
        try:
            lanes[key] = split_waiting_key(key)[0]
        except ValueError:
            continue
    return lanes
