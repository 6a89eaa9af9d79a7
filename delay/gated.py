"""Gated: due keys the publish gate turned away (Rock-DMQ: another replica's turn), kept by key so the
scheduler asks about them again one by one instead of moving its cursor back over the due range.

A key is held until its re-ask time or until ``release_all`` (the gate's answers may have changed), then
it is ready: the scheduler takes it with ``take_ready`` and asks again by key. A key its mark (or a
cancel) removed from the store meanwhile is forgotten (``forget``), not asked about. At most ``cap`` keys are
kept; a key turned away beyond that is not kept, only the lowest of them (``overflow``): when its time
comes the scheduler moves its cursor back to it and scans again from there, as before this structure
(correct, only slower), so memory stays bounded whatever the burst.
"""

from __future__ import annotations

import heapq
from collections import deque

READY = -1  # the re-ask time of a key whose time came: in the ready queue


class Gated:
    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("cap must be >= 1")
        self.cap = cap
        self._until: dict[bytes, int] = {}  # kept key -> re-ask time, or READY
        self._timers: list[tuple[int, bytes]] = []  # heap; an entry is stale once _until disagrees
        self._low: list[bytes] = []  # heap of kept keys; stale entries (not kept any more) are skipped
        self._ready: deque[bytes] = deque()
        self.overflow: bytes | None = None  # the lowest key turned away but not kept (cap reached)
        self._overflow_ms: int | None = None

    def __contains__(self, key: bytes) -> bool:
        return key in self._until

    def hold(self, keys: list[bytes], until_ms: int) -> None:
        """Keep ``keys`` until ``until_ms``; past the cap, only remember the lowest of the rest."""
        for key in keys:
            if key in self._until:
                continue  # the scheduler skips kept keys; nothing to do if it did not
            if len(self._until) >= self.cap:
                self.overflow = key if self.overflow is None else min(self.overflow, key)
                at = self._overflow_ms
                self._overflow_ms = until_ms if at is None else min(at, until_ms)
                continue
            self._until[key] = until_ms
            heapq.heappush(self._timers, (until_ms, key))
            heapq.heappush(self._low, key)
        self._compact()

    def forget(self, keys: list[bytes]) -> int:
        """No longer keep ``keys`` (a cancel or a mark removed them from the store): nothing to ask about
        again. Returns how many were kept. Their heap and ready entries go stale and are skipped."""
        until = self._until
        forgotten = 0
        for key in keys:
            if until.pop(key, None) is not None:
                forgotten += 1
        return forgotten

    def expire(self, now_ms: int) -> bytes | None:
        """Make ready every kept key whose time came; returns the overflow key if its time came (the
        cursor goes back to it), and forgets it."""
        timers = self._timers
        while timers and timers[0][0] <= now_ms:
            until, key = heapq.heappop(timers)
            if self._until.get(key) == until:
                self._until[key] = READY
                self._ready.append(key)
        if self._overflow_ms is not None and self._overflow_ms <= now_ms:
            return self._take_overflow()
        return None

    def release_all(self) -> bytes | None:
        """Make every kept key ready now, lowest first; returns the overflow key (forgotten), if any."""
        waiting = sorted(key for key, until in self._until.items() if until != READY)
        for key in waiting:
            self._until[key] = READY
        self._ready.extend(waiting)
        self._timers.clear()
        return self._take_overflow()

    def take_ready(self, limit: int) -> list[bytes]:
        """Up to ``limit`` ready keys, no longer kept: the caller asks about them again (and holds them
        again if the gate still says no)."""
        taken: list[bytes] = []
        while self._ready and len(taken) < limit:
            key = self._ready.popleft()
            if self._until.get(key) == READY:  # not a stale entry of a key forgotten and held again
                del self._until[key]
                taken.append(key)
        return taken

    @property
    def has_ready(self) -> bool:
        return bool(self._ready)

    def __len__(self) -> int:
        """Keys kept (waiting or ready): the cap counts both."""
        return len(self._until)

    def next_ms(self) -> int | None:
        """The earliest re-ask time (kept keys or the overflow), ignoring ready keys."""
        timers = self._timers
        while timers and self._until.get(timers[0][1]) != timers[0][0]:
            heapq.heappop(timers)
        candidates = [ms for ms in (timers[0][0] if timers else None, self._overflow_ms) if ms is not None]
        return min(candidates, default=None)

    def lowest(self) -> bytes | None:
        """The lowest key kept or overflowed: the store's floor must not pass it."""
        low = self._low
        while low and low[0] not in self._until:
            heapq.heappop(low)
        candidates = [key for key in (low[0] if low else None, self.overflow) if key is not None]
        return min(candidates, default=None)

    def _take_overflow(self) -> bytes | None:
        key, self.overflow, self._overflow_ms = self.overflow, None, None
        return key

    def _compact(self) -> None:
        """Stale heap entries are dropped lazily; rebuild a heap that grew well past the kept keys."""
        limit = 2 * len(self._until) + 1024
        if len(self._low) > limit:
            self._low = list(self._until)
            heapq.heapify(self._low)
        if len(self._timers) > limit:
            self._timers = [(until, key) for key, until in self._until.items() if until != READY]
            heapq.heapify(self._timers)
