"""Counters of a consumer (pulls, flow-control pauses, send-backs, rebalances...) that can be awaited:
tests and readiness checks wait for a count instead of polling it."""

from __future__ import annotations

import asyncio
from collections import Counter


class Stats(Counter[str]):
    def __init__(self) -> None:
        super().__init__()
        self._waiters: list[tuple[str, int, asyncio.Future[None]]] = []

    def bump(self, name: str, n: int = 1) -> None:
        self[name] += n
        if self._waiters:
            still = []
            for key, count, fut in self._waiters:
                if fut.done():
                    continue
                if self[key] >= count:
                    fut.set_result(None)
                else:
                    still.append((key, count, fut))
            self._waiters = still

    async def reach(self, name: str, count: int) -> None:
        """Return once ``self[name] >= count``."""
        if self[name] >= count:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((name, count, fut))
        await fut
