"""DueQueue: the durable half of the due-queue engine that the retry and delay stores share.

One column family of keys that start with their due time (storage.keys, byte order == due-time
order), its meta column family (storage.progress: the clock and the seek floor), the claims on keys
in flight (storage.claims), and the listeners told about every batch that adds keys. The stores keep
only their own state transitions (which ops a spool, an ack or a cancel writes) and hand the ops to
``commit``. The loop half is storage.due_loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from .claims import Claims
from .clock import SteadyClock, wall_ms
from .errors import UnsyncedError
from .group_commit import GroupCommitWriter
from .key_count import KeyCount
from .keys import due_bound
from .kv import KV, Op
from .progress import Progress

Listener = Callable[[bytes], None]
# A commit's bookkeeping: then(held, synced). ``held``: the store holds the batch (also when its WAL sync
# failed after the apply: readable, replayed on reopen), what counts keys follows it; ``synced``: it is
# durable (the caller was told so), what releases claims or tells others follows that.
Then = Callable[[bool, bool], None]


class DueQueue:
    """Due-ordered keys in ``due_cf`` of ``kv``, written through ``writer``; ``name`` is for the logs."""

    def __init__(
        self,
        kv: KV,
        writer: GroupCommitWriter,
        due_cf: str,
        meta_cf: str,
        name: str,
        *,
        now_ms: Callable[[], int] = wall_ms,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.writer = writer
        self.due_cf = due_cf
        self._name = name
        self.claims = Claims()
        self._progress = Progress(kv, meta_cf, SteadyClock(now_ms, clock))  # R5 and R6 across restarts
        self._progress.verify_floor(kv, due_cf, name)
        self._listeners: list[Listener] = []

    def now_ms(self) -> int:
        """The queue's clock: wall-clock ms that never run backwards (use it for due times)."""
        return self._progress.clock.now()

    def lead_ms(self) -> int:
        """How far ``now_ms`` runs ahead of the wall clock (SteadyClock.lead_ms): add it to a wall time."""
        return self._progress.clock.lead_ms()

    # --- listeners ------------------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """``listener(key)`` runs after every batch that added keys, with the smallest of them, and
        whenever keys are given back (``notify``)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def notify(self, key: bytes) -> None:
        """Tell the listeners that ``key`` (live) may sort below their cursor: seek it again."""
        for listener in list(self._listeners):
            listener(key)

    # --- writing ----------------------------------------------------------------------------------
    async def commit(
        self,
        ops: list[Op],
        new_key: bytes | None = None,
        now: int | None = None,
        then: Then | None = None,
        *,
        lazy: bool = False,
    ) -> None:
        """Write ``ops`` durably; ``new_key`` is the smallest due key they add, if any (the floor is
        lowered to it in the same batch, and the listeners hear of it once the store holds it).
        ``then(held, synced)`` (see Then) does the caller's bookkeeping before the listeners run, written
        or not. ``lazy``: ops that only remove keys and nobody waits on for a due time
        (GroupCommitWriter.write).

        Raises:
            UnsyncedError: the batch was applied (the store holds it) but not synced.
            StorageError: the batch was not written.
        """
        held = synced = False
        try:
            when = self.now_ms() if now is None else now
            await self._progress.write(self.writer, ops, new_key, when, lazy=lazy)
            held = synced = True
        except UnsyncedError:
            # Only here, on a failure, is it told apart: the success path pays nothing for it.
            held = True
            raise
        finally:
            if then is not None:
                then(held, synced)
            if held and new_key is not None:
                self.notify(new_key)  # synced or not, its keys are live: the loops must seek them

    async def probe(self) -> None:
        """One small synced write (the floor): whether the store writes again.

        Raises:
            StorageError: the store still fails writes.
        """
        await self._progress.write(self.writer, [], None, self.now_ms(), save_floor=True)

    async def save(self) -> None:
        """Write the floor one last time if it moved (close): a clean restart seeks from the exact floor."""
        await self._progress.save(self.writer, self._name)

    # --- reading ----------------------------------------------------------------------------------
    def due(self, start: bytes, now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
        """(key, value) pairs with start <= key and due at or before ``now_ms``, claimed or not."""
        return self.kv.scan(self.due_cf, lower=start, upper=due_bound(now_ms), limit=limit)

    def first(self, start: bytes = b"") -> bytes | None:
        """The smallest key at or after ``start``, due or not."""
        found = self.kv.scan(self.due_cf, lower=start, limit=1)
        return found[0][0] if found else None

    # --- claims and the floor -----------------------------------------------------------------------
    def claim(self, key: bytes) -> bool:
        """Own ``key`` (deliver, publish or delete it); False if another owner has it."""
        return self.claims.take(key)

    def release(self, keys: Iterable[bytes]) -> None:
        self.claims.release(keys)

    def is_claimed(self, key: bytes) -> bool:
        return key in self.claims

    @property
    def floor(self) -> bytes:
        """No live key sorts below this (persisted: a restart starts seeking here)."""
        return self._progress.floor

    def advance_floor(self, cursor: bytes) -> None:
        """A loop's promise that every live key it has not claimed is >= ``cursor``. The floor never
        passes a claimed key (one in flight is not acknowledged yet) nor a key whose batch is still
        being written."""
        lowest = self.claims.lowest()
        self._progress.advance_floor(cursor if lowest is None else min(cursor, lowest))


class QueueBacked:
    """What a store built on a DueQueue answers from it: whether it takes writes (its writer's health;
    ``writer.last_error`` says why not), its clock, its due keys and how many there are (``_pending``,
    the store's count of the due column family, kept by the store as it adds and removes keys)."""

    def __init__(self, queue: DueQueue) -> None:
        """``queue``: the due-queue engine of the store (its due keys, their claims, clock and floor),
        over the store's KV and writer."""
        self.kv = queue.kv
        self.writer = queue.writer
        self.queue = queue
        # No full key count at open of a large store (seconds with 10 M due keys): storage.key_count.
        self._pending = KeyCount(queue.kv, queue.due_cf)

    @property
    def pending_count(self) -> int:
        return self._pending.value

    @property
    def healthy(self) -> bool:
        return self.writer.healthy

    def now_ms(self) -> int:
        """Wall-clock ms that never run backwards (use it for due times)."""
        return self.queue.now_ms()

    def lead_ms(self) -> int:
        """How far ``now_ms`` runs ahead of the wall clock, 0 unless it was stepped back: an absolute wall
        time (a client's deliverAt, a broker's timestamp) is ``at + lead_ms()`` on the store's clock."""
        return self.queue.lead_ms()

    def due(self, start: bytes, now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
        """Due (key, value) pairs with start <= key and due at or before ``now_ms``, claimed or not."""
        return self.queue.due(start, now_ms, limit)
