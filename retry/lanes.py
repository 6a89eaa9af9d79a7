"""Lanes of the retry store: what keeps a sharding key's spooled messages in their order.

A lane is a (topic, sharding key). Its first message spooled is pending (its head), replayed on the
ladder as any other; the ones spooled after it wait (retry_waiting, not pending: the replay never sees
them), and when the head leaves pending (delivered, dead-lettered, purged, withdrawn) the first of them
takes its place, due now. LaneBatch: the ops one store call writes for its lanes. LaneLocks: one asyncio
lock per lane, taken only by what reads or changes a lane (a message without a key takes none).

The store builds a batch's ops now and the group-commit writer applies them later: a decision made from a
lane's entry (who is its head, where its tail is) is right only if no other decision on that lane is
made before the batch lands. So each is made under the lane's lock, held from reading the entry until the
batch is settled (written or failed), and released then by the batch's bookkeeping (storage.due_queue
Then), not by the caller: a caller cancelled while its shielded batch syncs must not let the next one read
the entry before that batch lands. Several lanes are taken in sorted order (no two callers wait on each
other). A lock is dropped from the dict once nobody holds or waits for it: one entry per busy lane, never
one per lane ever seen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Container, Iterable

from rocksidecar.storage.keys import MAX_DUE_MS, clamp_due
from rocksidecar.storage.kv import KV, Delete, Op, Put

from .dead_letter import encode_dead
from .keys import (
    DEAD_CF,
    INDEX_CF,
    LANES_CF,
    PENDING,
    PENDING_CF,
    WAITING,
    WAITING_CF,
    Lane,
    dead_key,
    decode_lane,
    encode_lane,
    index_key,
    lane_key,
    pending_key,
    split_waiting_key,
    waiting_after,
    waiting_bounds,
    waiting_key,
)
from .oldest import since_of
from .record import CorruptRecordError, RetryRecord, decode_record, encode_record

log = logging.getLogger(__name__)


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # holding or waiting


class LaneLocks:
    """The lanes' locks of one store (see the module's docstring)."""

    def __init__(self) -> None:
        self._locks: dict[bytes, _Entry] = {}

    def __len__(self) -> int:
        """Lanes held or waited for now (tests)."""
        return len(self._locks)

    async def acquire(self, lanes: Iterable[bytes]) -> Held:
        """Hold every lane of ``lanes`` (in sorted order); cancelled while waiting, holds none."""
        taken: list[tuple[bytes, _Entry]] = []
        for lane in sorted(set(lanes)):
            entry = self._locks.get(lane)
            if entry is None:
                entry = self._locks[lane] = _Entry()
            entry.users += 1
            taken.append((lane, entry))
        held = Held(self, taken)
        try:
            for _, entry in taken:
                await entry.lock.acquire()
                held.locked += 1
        except BaseException:
            held.release()
            raise
        return held

    def _drop(self, lane: bytes, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users == 0 and self._locks.get(lane) is entry:
            del self._locks[lane]


class Held:
    """Lanes one caller holds; ``release`` (idempotent) lets them go."""

    __slots__ = ("_owner", "_taken", "locked")

    def __init__(self, owner: LaneLocks, taken: list[tuple[bytes, _Entry]]) -> None:
        self._owner = owner
        self._taken = taken
        self.locked = 0  # how many of ``taken`` (the first ones) are acquired

    def release(self) -> None:
        taken, self._taken = self._taken, []
        for n, (lane, entry) in enumerate(taken):
            if n < self.locked:
                entry.lock.release()
            self._owner._drop(lane, entry)
        self.locked = 0


class LaneBatch:
    """The lane decisions of one store call, made under its lanes' locks (LaneLocks): each lane's entry
    read once from ``kv`` and changed here, the ops (``ops``, then ``finish``) written in the call's one
    batch, and what they change in the counts (``pending``, ``waiting``, ``opened``: lanes; ``dead`` and
    ``removed``: damaged waiting keys dead-lettered, and their records' since_ms)."""

    def __init__(self, kv: KV, now_ms: int, arriving: Container[bytes] = ()) -> None:
        self._kv = kv
        self._now = now_ms
        self._arriving = arriving  # pending keys other calls are writing now (RetryStore._arriving)
        self._entries: dict[bytes, Lane | None] = {}
        self._unreadable: set[bytes] = set()  # lanes whose entry is there but does not decode
        self._changed: dict[bytes, None] = {}  # lanes whose entry is written (in order)
        self.ops: list[Op] = []
        self.promoted: list[bytes] = []  # pending keys of waiting records that took their head's place
        self.pending = 0
        self.waiting = 0
        self.opened = 0
        self.dead = 0
        self.removed: list[int] = []

    def entry(self, lane: bytes) -> Lane | None:
        if lane not in self._entries:
            raw = self._kv.get(LANES_CF, lane)
            try:
                self._entries[lane] = None if raw is None else decode_lane(raw)
            except ValueError:
                self._entries[lane] = None  # not one this version wrote: the next head rewrites it
                self._unreadable.add(lane)
        return self._entries[lane]

    def put_pending(self, key: bytes, record: RetryRecord) -> None:
        self.ops.append(Put(PENDING_CF, key, encode_record(record)))
        self.ops.append(Put(INDEX_CF, index_key(record.id, PENDING, key), b""))
        self.pending += 1

    def behind(self, lane: bytes, record: RetryRecord) -> bytes | None:
        """Queue ``record`` at the tail of ``lane`` and return its waiting key; None when the lane has no
        entry (the caller makes it the head: ``open``)."""
        entry = self.entry(lane)
        if entry is None:
            return None
        entry.tail_seq += 1
        key = waiting_key(lane, entry.tail_seq, record.id)
        self.ops.append(Put(WAITING_CF, key, encode_record(record)))
        self.ops.append(Put(INDEX_CF, index_key(record.id, WAITING, key), b""))
        self._changed[lane] = None
        self.waiting += 1
        return key

    def open(self, lane: bytes, head: bytes) -> None:
        """``head`` (a pending key written in this batch) is the first message of ``lane``, which has no
        entry. One whose entry does not decode may have records waiting: the next one queued goes after
        them (its tail the last of theirs), and they are promoted after ``head``, from the lane's start."""
        if lane in self._unreadable:  # (it was there, unreadable: counted already)
            self._entries[lane] = Lane(0, self._last_seq(lane), head)
        else:
            self._entries[lane] = Lane(0, 0, head)
            self.opened += 1
        self._changed[lane] = None

    def moved(self, lane: bytes, old: bytes, new: bytes) -> None:
        """The record under pending ``old`` is rescheduled under ``new``: if it is the head, the entry
        follows it."""
        entry = self.entry(lane)
        if entry is not None and entry.head == old:
            entry.head = new
            self._changed[lane] = None

    def left(self, lane: bytes, key: bytes, gone: Container[bytes] = ()) -> None:
        """The record under pending ``key`` leaves (delivered, dead, purged): if it is the head, the first
        waiting record of the lane but those in ``gone`` (removed by the same batch) takes its place, due
        now, its retry count as stored; with none, the lane's entry goes. A record that is not its lane's
        head (spooled by an older version, which kept no lanes) moves nobody. Of a lane whose entry does
        not decode (its head unknown), the record that leaves is taken for its head: else the ones waiting
        behind it waited for good; the entry is written anew."""
        entry = self.entry(lane)
        if entry is None and lane in self._unreadable:
            entry = self._entries[lane] = Lane(0, self._last_seq(lane), key)
        if entry is None or entry.head != key:
            return
        # From after the head: the lane's keys before it are gone (promoted, or purged), and on RocksDB a
        # seek from the lane's start stepped over each one's tombstone, every promotion (O(n^2) a lane).
        lower, upper = waiting_after(lane, entry.head_seq), waiting_bounds(lane)[1]
        for wkey, raw in self._kv.iterate(WAITING_CF, lower=lower, upper=upper):
            if wkey in gone:
                continue
            try:
                _, seq, id_ = split_waiting_key(wkey)
            except ValueError:
                self._bury_damaged(wkey, raw)  # the head's leave must land all the same, and the next go
                continue
            try:
                record = decode_record(raw)
                count, type_ = record.retry_count, record.type
            except CorruptRecordError:
                count, type_ = 0, ""  # as stored: the replay quarantines it, and the next one goes
            new = self._free_key(count, type_, id_)
            self.ops.append(Delete(WAITING_CF, wkey))
            self.ops.append(Delete(INDEX_CF, index_key(id_, WAITING, wkey)))
            self.ops.append(Put(PENDING_CF, new, raw))
            self.ops.append(Put(INDEX_CF, index_key(id_, PENDING, new), b""))
            entry.head_seq, entry.head = seq, new
            self.promoted.append(new)
            self._changed[lane] = None
            self.pending += 1
            self.waiting -= 1
            return
        self._entries[lane] = None
        self._changed[lane] = None
        self.opened -= 1

    def _last_seq(self, lane: bytes) -> int:
        """The last sequence number among ``lane``'s waiting keys (0: none): a read of the whole lane, for
        one whose entry does not decode only (the tail it kept is lost, and the next one queued must sort
        after every one waiting)."""
        last = 0
        lower, upper = waiting_bounds(lane)
        for wkey, _ in self._kv.iterate(WAITING_CF, lower=lower, upper=upper):
            try:
                last = max(last, split_waiting_key(wkey)[1])
            except ValueError:
                continue
        return last

    def _bury_damaged(self, wkey: bytes, raw: bytes) -> None:
        """Move a key of a lane's range that is not a waiting key (damage: no version writes one, and the
        listing skips it) to the dead letters, its bytes kept, as a record that does not decode is: it is
        no longer counted pending, and an operator sees it (and may re-drive the record, if it is one)."""
        log.warning("retry_waiting holds a damaged key, moved to the dead letters: %r", wkey)
        self.ops.append(Delete(WAITING_CF, wkey))
        value = encode_dead("damaged waiting key", self._now, raw)
        self.ops.append(Put(DEAD_CF, dead_key(self._now, wkey), value))
        self.waiting -= 1
        self.dead += 1
        self.removed.append(since_of(raw))

    def _free_key(self, count: int, type_: str, id_: str) -> bytes:
        return free_pending_key(
            self._kv, self._now, count, type_, id_, lambda key: key in self.promoted or key in self._arriving
        )

    def finish(self) -> list[Op]:
        """``ops`` with the changed lane entries written (or deleted) after them."""
        for lane in self._changed:
            entry = self._entries[lane]
            self.ops.append(
                Delete(LANES_CF, lane) if entry is None else Put(LANES_CF, lane, encode_lane(entry))
            )
        self._changed.clear()
        return self.ops


def free_pending_key(
    kv: KV, now_ms: int, retry_count: int, type_: str, id_: str, taken: Callable[[bytes], bool]
) -> bytes:
    """A pending key for the message ``id_`` due now that holds nothing and that no other write is adding
    (``taken``): the same message pending twice would share it (one row, counted twice), as two dead
    letters of one message re-driven in one millisecond would. The next millisecond is just as due."""
    due = clamp_due(now_ms)
    key = pending_key(due, retry_count, type_, id_)
    while (taken(key) or kv.get(PENDING_CF, key) is not None) and due < MAX_DUE_MS:
        due += 1
        key = pending_key(due, retry_count, type_, id_)
    return key


def lane_of(record: RetryRecord) -> bytes | None:
    """The lane of ``record``: its topic and sharding key; None without a key (no lane)."""
    key = record.sharding_key
    return lane_key(record.topic, key) if key else None


def lane_headed_by(kv: KV, key: bytes) -> bytes | None:
    """The lane whose head is pending ``key``, found by reading every lane entry: only for a record whose
    value does not decode (its topic and key unknown), which is rare (a quarantine)."""
    for lane, raw in kv.iterate(LANES_CF):
        try:
            if decode_lane(raw).head == key:
                return lane
        except ValueError:
            continue
    return None
