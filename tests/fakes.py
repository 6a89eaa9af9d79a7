"""Test doubles shared by the storage and retry suites: a controllable clock and a failing KV."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Sequence
from typing import Any

from storage.errors import StorageError
from storage.kv import KV, Op


class FakeClock:
    """Wall milliseconds, a monotonic clock and a sleep that only return when the test advances time.

    ``now_ms`` can be stepped on its own (a wall-clock jump); ``advance`` moves both clocks and wakes
    the sleepers whose deadline passed.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.wall_ms = start_ms
        self.mono_s = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.wall_ms

    def monotonic(self) -> float:
        return self.mono_s

    def sleep(self, seconds: float) -> asyncio.Future[None]:
        """Registers the deadline when called (not when first awaited), as a timer would."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if seconds <= 0:
            future.set_result(None)
        else:
            heapq.heappush(self._sleepers, (self.mono_s + seconds, next(self._seq), future))
        return future

    def advance(self, seconds: float) -> None:
        self.mono_s += seconds
        self.wall_ms += round(seconds * 1000)
        while self._sleepers and self._sleepers[0][0] <= self.mono_s:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    def step_wall(self, ms: int) -> None:
        """An NTP step or an operator's ``date -s``: the wall clock jumps, monotonic time does not."""
        self.wall_ms += ms


class FaultyKV:
    """Wraps a KV; writes or WAL syncs fail with an injected StorageError while a fault is set."""

    def __init__(self, inner: KV) -> None:
        self.inner = inner
        self.column_families = inner.column_families
        self.write_fault: str | None = None
        self.sync_fault: str | None = None
        self.writes = 0
        self.syncs = 0

    def write(self, ops: Sequence[Op], *, sync: bool) -> None:
        if self.write_fault is not None:
            raise StorageError(self.write_fault)
        self.inner.write(ops, sync=sync)
        self.writes += 1
        if sync:
            self.sync_wal()

    def sync_wal(self) -> None:
        if self.sync_fault is not None:
            raise StorageError(self.sync_fault)
        self.inner.sync_wal()
        self.syncs += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
