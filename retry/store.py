"""RetryStore: the durable spool of messages waiting for redelivery, over a KV and a group-commit writer.

Column families: ``retry_pending`` (keys in due-time order, see retry.keys), ``retry_index`` (id ->
where the message is), ``retry_dead`` (dead letters) and ``retry_meta`` (see storage.progress).
Every state change is one atomic batch, and no method returns before its batch is synced.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.due_queue import DueQueue, QueueBacked, Then
from rocksidecar.storage.errors import UnsyncedError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.key_count import KeyCount
from rocksidecar.storage.keys import MAX_DUE_MS, clamp_due
from rocksidecar.storage.kv import KV, Delete, Op, Put

from .dead_letter import DeadLetter, decode_dead, encode_dead
from .dead_letters import DeadLetters
from .keys import (
    COLUMN_FAMILIES,
    DEAD,
    DEAD_CF,
    INDEX_CF,
    META_CF,
    PENDING,
    PENDING_CF,
    dead_key,
    id_of,
    index_key,
    index_prefix,
    parse_pending_key,
    pending_key,
    pending_of_dead,
    split_index_key,
)
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
        self._oldest = OldestPending()
        values = (raw for _, raw in kv.iterate(PENDING_CF))
        if self._pending.exact and self._pending.value <= SYNC_SCAN_LIMIT:
            self._oldest.load(values)
        else:
            self._oldest.load_in_background(values)

    @property
    def dead_count(self) -> int:
        return self._dead.value

    def wait_counted(self, timeout_s: float | None = None) -> bool:
        """Wait for the exact counts behind pending_count and dead_count (tests); whether they are done."""
        return self._pending.wait(timeout_s) and self._dead.wait(timeout_s) and self._oldest.wait(timeout_s)

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
        self._pending.close()
        self._dead.close()
        self._oldest.close()
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
        sinces = [since_ms(r) for r in records] if records is not None else [self._since_at(k) for k in keys]

        def written(held: bool, synced: bool) -> None:
            if held:
                self._pending.add(-len(keys))
                for since in sinces:
                    self._oldest.remove(since)

        await self._commit([op for key in keys for op in self._unlink(key)], None, None, written)

    async def bury(
        self, key: bytes, record: RetryRecord, reason: str, *, was: RetryRecord | None = None
    ) -> bytes:
        """Move the message under ``key`` to the dead letters, with its history and ``reason``. ``was``:
        the record under ``key`` when the caller has it (else it is read here)."""
        since = since_ms(was) if was is not None else None
        return await self.quarantine(key, encode_record(record), reason, _since=since)

    async def quarantine(self, key: bytes, raw: bytes, reason: str, *, _since: int | None = None) -> bytes:
        """Move the stored bytes under ``key`` (decodable or not) to the dead letters."""
        since = self._since_at(key) if _since is None else _since
        now = self.now_ms()
        dkey = dead_key(now, key)
        value = encode_dead(reason, now, raw)
        ops: list[Op] = [Put(DEAD_CF, dkey, value), *self._unlink(key)]
        id_ = id_of(key)
        if id_ is not None:
            ops.append(Put(INDEX_CF, index_key(id_, DEAD, dkey), b""))

        def written(held: bool, synced: bool) -> None:
            if held:
                self._pending.add(-1)
                self._oldest.remove(since)
                self._dead.add(1)

        try:
            await self._commit(ops, None, now, written)
        except UnsyncedError:
            # Buried all the same (only its WAL sync failed): no longer pending, nothing buries it again,
            # so the hook (the dead-letter metric, the webhook) hears of it now or never.
            await self._notify_dead(decode_dead(dkey, value))
            raise
        await self._notify_dead(decode_dead(dkey, value))
        return dkey

    async def redrive(self, dkey: bytes) -> bytes:
        """Move one dead letter back to pending, retry count reset, due now. Returns its new key.

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
        key = self._free_pending_key(record)
        ops: list[Op] = [
            Put(PENDING_CF, key, encode_record(record)),
            Put(INDEX_CF, index_key(record.id, PENDING, key), b""),
            Delete(DEAD_CF, dkey),
        ]
        old_id = id_of(pending_of_dead(dkey))
        if old_id is not None:
            ops.append(Delete(INDEX_CF, index_key(old_id, DEAD, dkey)))
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

    def _free_pending_key(self, record: RetryRecord) -> bytes:
        """A pending key for ``record`` due now (retry count 0) that holds nothing and that no other
        redrive is writing: two dead letters of one message re-driven in one millisecond would share
        one key otherwise (one row, counted twice). The next millisecond is just as due."""
        due = clamp_due(self.now_ms())
        key = pending_key(due, 0, record.type, record.id)
        while (key in self._arriving or self.kv.get(PENDING_CF, key) is not None) and due < MAX_DUE_MS:
            due += 1
            key = pending_key(due, 0, record.type, record.id)
        return key

    async def purge(
        self, pending: Sequence[bytes] = (), dead: Sequence[bytes] = (), *, also: Sequence[Op] = ()
    ) -> int:
        """Delete pending and dead keys for good (the admin's purge), in one batch; returns how many it
        deleted. A pending key that is claimed (a replay has it in flight, another purge is deleting it)
        is left to its owner, not deleted or counted here. ``also``: the caller's ops, written in the same
        batch when every pending key given is deleted by it (else not written).

        Raises:
            StorageError: nothing was deleted.
        """
        claims = self.queue.claims
        # No await between these reads and the claims taken below: the seek loop, a replay-now and a
        # second purge cannot take a key between. Claimed, a key that falls due while this batch waits
        # for its sync is not handed to a worker (whose reschedule would write it back, uncounted, or
        # whose ack would count it down a second time), and the floor stays below it.
        asked = dict.fromkeys(pending)
        # Each record's since_ms, not its value: kept until the commit, the values of a batch of a
        # thousand were every body at once.
        sinces: list[int] = []
        pending = []
        for k in asked:
            if k not in claims and (raw := self.kv.get(PENDING_CF, k)) is not None:
                pending.append(k)
                sinces.append(since_of(raw))
        # one a redrive or another purge is removing now is theirs (see redrive)
        dead = [
            k for k in dict.fromkeys(dead) if k not in self._leaving and self.kv.get(DEAD_CF, k) is not None
        ]
        ops: list[Op] = [op for key in pending for op in self._unlink(key)]
        for dkey in dead:
            ops.append(Delete(DEAD_CF, dkey))
            old_id = id_of(pending_of_dead(dkey))
            if old_id is not None:
                ops.append(Delete(INDEX_CF, index_key(old_id, DEAD, dkey)))
        if not ops:
            return 0
        if also and len(pending) == len(asked):
            ops.extend(also)
        for key in pending:
            claims.take(key)
        self._leaving.update(dead)

        def written(held: bool, synced: bool) -> None:
            claims.release(pending)
            self._leaving.difference_update(dead)
            if held:
                self._pending.add(-len(pending))
                for since in sinces:
                    self._oldest.remove(since)
                self._dead.add(-len(dead))
            if not synced and pending:
                # Still stored (unless only the sync failed: then it finds them gone), and the seek
                # loop may have passed them while they were claimed: it must read them again.
                self.queue.notify(min(pending))

        # Shielded (_commit): a caller cancelled while the batch syncs must not leave the keys claimed
        # either (never replayed until a restart).
        await self._commit(ops, None, None, written)
        return len(pending) + len(dead)

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
        keys = [key for state, key in self._indexed(id_) if state == PENDING]
        return bool(keys) and await self.purge(pending=keys, also=also) == len(keys)

    def _indexed(self, id_: str) -> list[tuple[bytes, bytes]]:
        """Message ``id_``'s (state, key) entries of the id index: its pending and dead keys."""
        prefix = index_prefix(id_)
        return [
            split_index_key(k) for k, _ in self.kv.scan(INDEX_CF, lower=prefix, upper=prefix[:-1] + b"\x01")
        ]

    def get(self, id_: str) -> MessageStatus | None:
        """Where message ``id_`` stands: SPOOLED (next attempt, attempts) or DEAD (reason), or None."""
        entries = self._indexed(id_)
        for _, key in sorted(e for e in entries if e[0] == PENDING):
            raw = self.kv.get(PENDING_CF, key)
            if raw is not None:
                return self._pending_status(id_, key, raw)
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
    def _pending_status(id_: str, key: bytes, raw: bytes) -> MessageStatus:
        parsed = parse_pending_key(key)
        try:
            record = decode_record(raw)
        except CorruptRecordError as exc:
            # what the key alone tells: the count and due time live there, the topic does not
            attempts, last_error, topic = parsed.retry_count, f"corrupt value: {exc}", None
        else:
            attempts, last_error, topic = record.failed_attempts, record.last_error, record.topic
        return MessageStatus(
            id_, State.SPOOLED, key, attempts, last_error, topic=topic, next_attempt_at_ms=parsed.due_ms
        )

    def pending_record(self, key: bytes) -> RetryRecord | None:
        """The record under a pending key; raises CorruptRecordError for undecodable bytes."""
        raw = self.kv.get(PENDING_CF, key)
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
