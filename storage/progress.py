"""Progress: what a restart of a due-time-ordered store needs from the run before it, kept in the
store's own meta column family (the retry and delay stores each have one).

The clock's high-water mark (R5: a host clock set back across a restart does not stall due keys) and
the seek floor (R6: no live pending key sorts below it, so a restart seeks from it instead of crossing
the tombstones of everything delivered before). Both ride on batches that are written anyway.
"""

from __future__ import annotations

import logging

from .clock import SteadyClock
from .errors import StorageError
from .group_commit import GroupCommitWriter
from .kv import KV, Op, Put

log = logging.getLogger(__name__)

CLOCK_KEY = b"clock_high_water_ms"
FLOOR_KEY = b"pending_floor"
PERSIST_EVERY_MS = 1000
_UNKNOWN = b"\xff"  # above every pending key (they start with digits): "write the floor again"


class Progress:
    """The store's clock and floor. ``stamp`` adds their updates to a batch before it is written;
    ``settled`` is called when the batch is done."""

    def __init__(self, kv: KV, meta_cf: str, clock: SteadyClock) -> None:
        self._meta_cf = meta_cf
        self.clock = clock
        saved = kv.get(meta_cf, CLOCK_KEY)
        if saved is not None and saved.isdigit():
            self.clock.restore(int(saved))
        self._clock_saved_ms = 0
        self.floor = kv.get(meta_cf, FLOOR_KEY) or b""
        self._floor_saved = self.floor  # as on disk, or _UNKNOWN after a failed batch
        self._floor_saved_ms = 0
        self._unsettled: dict[bytes, int] = {}  # pending keys whose batch is not written yet

    def verify_floor(self, kv: KV, pending_cf: str, store: str) -> bytes | None:
        """At open: a live key below the persisted floor would never be sought again. That is a bug
        (the floor must never pass an unacknowledged key), so say so and lower the floor to it; the
        next batch persists the lowered floor. Returns the key found, if any."""
        if not self.floor:
            return None
        below = kv.scan(pending_cf, upper=self.floor, limit=1)
        if not below:
            return None
        key = below[0][0]
        log.error(
            "the %s floor %r is above the live key %r: lowering it, the keys below are replayed",
            store,
            self.floor,
            key,
        )
        self.floor = key
        return key

    @property
    def floor_unsaved(self) -> bool:
        return self.floor != self._floor_saved

    def advance_floor(self, floor: bytes) -> None:
        """The replay loop's promise that every live pending key is >= ``floor``; keys whose batch
        is still being written keep the floor below them."""
        if self._unsettled:
            floor = min([floor, *self._unsettled])
        self.floor = max(self.floor, floor)

    def stamp(self, ops: list[Op], new_key: bytes | None, now: int, *, save_floor: bool = False) -> None:
        """Append the clock and floor updates to ``ops``; ``new_key`` is the smallest pending key
        the batch adds. A lowered floor goes into that same batch, so a restart never seeks past a
        live key; a raised one and the clock are written at most once per PERSIST_EVERY_MS."""
        if now - self._clock_saved_ms >= PERSIST_EVERY_MS:
            self._clock_saved_ms = now
            ops.append(Put(self._meta_cf, CLOCK_KEY, str(now).encode()))
        if new_key is not None:
            self._unsettled[new_key] = self._unsettled.get(new_key, 0) + 1
            self.floor = min(self.floor, new_key)
        due = self.floor != self._floor_saved and now - self._floor_saved_ms >= PERSIST_EVERY_MS
        if save_floor or self.floor < self._floor_saved or due:
            ops.append(Put(self._meta_cf, FLOOR_KEY, self.floor))
            self._floor_saved, self._floor_saved_ms = self.floor, now

    def settled(self, new_key: bytes | None, *, written: bool) -> None:
        if not written:
            self._floor_saved = _UNKNOWN  # the floor on disk may be the old or the new value
        if new_key is not None:
            if self._unsettled[new_key] == 1:
                del self._unsettled[new_key]
            else:
                self._unsettled[new_key] -= 1

    async def write(
        self,
        writer: GroupCommitWriter,
        ops: list[Op],
        new_key: bytes | None,
        now: int,
        *,
        save_floor: bool = False,
        lazy: bool = False,
    ) -> None:
        """Write ``ops`` durably through ``writer``, stamped; ``new_key`` is the smallest pending key
        they add, if any. ``lazy`` (only for ops that add no key): the writer's lazy write, not stamped:
        written after ordinary batches queued later, it would carry a floor older than theirs (above a
        key one of them added) over them.

        Raises:
            StorageError: the batch was not written or not synced.
        """
        if lazy:
            if new_key is not None or save_floor:
                raise ValueError("a lazy write adds no key and saves no floor")
            await writer.write(ops, lazy=True)
            return
        self.stamp(ops, new_key, now, save_floor=save_floor)
        written = False
        try:
            await writer.write(ops)
            written = True
        finally:
            self.settled(new_key, written=written)

    async def save(self, writer: GroupCommitWriter, store: str) -> None:
        """Write the floor one last time if it moved, so a clean restart seeks from the exact floor."""
        if self.floor_unsaved and writer.healthy:
            try:
                await self.write(writer, [], None, self.clock.now(), save_floor=True)
            except StorageError as exc:
                log.warning("could not save the %s floor on close: %s", store, exc)
