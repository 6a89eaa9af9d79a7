"""The one supervised way to run background work, in the client and in the process around it
(heartbeats, route refresh, the producer's recovery probe, the sidecar's purge, samples and log
summaries), as Java's scheduled executors do."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

from .throttle import Throttle

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

MAX_TEXTS = 64  # distinct error texts held in one failing streak before the stale ones go
REPEAT_LOG_EVERY_S = 60.0  # a failure that repeats every round is logged again at most this often


@dataclass(eq=False)
class Periodic:
    """Runs ``job`` every ``interval_s`` from ``start`` until ``close``; the first run after one interval,
    or at once with ``run_first=True``. A round that raises is logged (with its traceback) and the next
    one runs: the loop must outlive any one round. The same failure round after round is logged once,
    then again at most every ``REPEAT_LOG_EVERY_S`` with how many rounds failed since, so a broken
    dependency does not flood the log."""

    name: str
    interval_s: float
    job: Callable[[], Awaitable[None]]
    sleep: Sleep = asyncio.sleep
    _: KW_ONLY
    run_first: bool = False
    clock: Callable[[], float] = time.monotonic
    logger: logging.Logger = log
    failures: int = field(default=0, init=False)  # every failed round, for tests and status
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _failing: bool = field(default=False, init=False, repr=False)
    _repeats: Throttle = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # one key per error text; a round that succeeds starts afresh (the next failure is news)
        self._repeats = Throttle(REPEAT_LOG_EVERY_S, self.clock)

    def start(self) -> None:
        """Idempotent: every owner sharing the job may call it."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        if not self.run_first:
            await self.sleep(self.interval_s)
        while True:
            await self.run_once()
            await self.sleep(self.interval_s)

    async def run_once(self) -> None:
        """One round, supervised: an exception is logged (throttled), never raised."""
        try:
            await self.job()
        except Exception as exc:
            self.failures += 1
            self._failed(exc)
        else:
            if self._failing:
                self._repeats, self._failing = Throttle(REPEAT_LOG_EVERY_S, self.clock), False

    def _failed(self, exc: Exception) -> None:
        self._failing = True
        if len(self._repeats) > MAX_TEXTS:
            self._repeats.expired()  # forget texts not seen for a window: bounded however many there are
        unlogged = self._repeats.allow((type(exc).__name__, str(exc)))
        if unlogged is None:
            return
        since = f" ({unlogged} more failed rounds since the last report)" if unlogged else ""
        self.logger.error("%s: round failed%s", self.name, since, exc_info=exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
