"""A background job run every interval (heartbeats, route refresh), as Java's scheduled executors do."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class Periodic:
    """Runs ``job`` every ``interval_s`` (the first run after one interval) from ``start`` until ``close``.
    A round that raises is logged and the next one runs: the loop must outlive any one round."""

    def __init__(
        self, name: str, interval_s: float, job: Callable[[], Awaitable[None]], sleep: Sleep = asyncio.sleep
    ) -> None:
        self.name = name
        self._interval_s = interval_s
        self._job = job
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Idempotent: every owner sharing the job may call it."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while True:
            await self._sleep(self._interval_s)
            try:
                await self._job()
            except Exception:
                log.exception("%s: round failed", self.name)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
