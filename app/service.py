"""The composition root: build the sidecar's parts from Settings (app.assembly; what the sidecar and a
Rock-DMQ replica build alike is app.wiring), start them in order, and stop them in reverse on SIGTERM
(stop accepting, finish in-flight requests, flush the store) within the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from rocksidecar.rmq.periodic import Periodic
from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.kv import KV

from . import logs
from .assembly import COLUMN_FAMILIES, DRAIN_CFS, SidecarParts, disk_reserve, warn_if_open
from .config import Settings, redacted
from .events import OpsEvents
from .metrics import Metrics
from .shutdown import close_delivery, close_stores, exit_now, start_unless_stopped, stop_within
from .wiring import StartupError, run_process, stop_on_signals, tune_gc

__all__ = ["COLUMN_FAMILIES", "DRAIN_CFS", "Service", "StartupError", "disk_reserve", "serve", "warn_if_open"]
log = logging.getLogger("rocksidecar")


class Service(SidecarParts):
    """Everything one sidecar process runs. ``start()`` then ``stop()``; or ``async with``."""

    def __init__(
        self,
        settings: Settings,
        *,
        namesrv: tuple[str, ...] | None = None,
        now_ms: Callable[[], int] = wall_ms,
        kv: KV | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.events = OpsEvents(late_threshold_s=settings.delay_late_log_ms / 1000)
        self._build_client(namesrv or settings.namesrv)
        self._build_store(kv)
        self._build_delivery(now_ms)
        self._build_transactions()
        self._build_http()
        self._build_subscriptions(namesrv or settings.namesrv)
        self._build_grpc()
        self._loops: list[Periodic] = self.background_loops()

    async def start(self) -> None:
        self.events.config(redacted(self.settings))
        warn_if_open(self.settings)
        if self.transactions is not None:
            self.transactions.start()  # the producer's first heartbeat announces its group
        await self.producer.start()
        await self._warm_routes()
        await self.replay.start()  # replays whatever the store holds from before (R6)
        await self.delay_scheduler.start()  # overdue delayed messages first
        await self._start_http()
        await self.grpc.start()
        await self._start_subscriptions()
        for loop in self._loops:
            loop.start()
        ready, details = await self.readiness()
        self.events.started(ready=ready, details=details, addresses=self._addresses())

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests, stop replays, flush and close the store."""
        grace = self.settings.shutdown_grace_s
        await asyncio.gather(*(loop.close() for loop in self._loops))
        if self.subscriptions is not None:  # first: persist offsets and leave the group at once
            await self.subscriptions.close()
        await asyncio.gather(self.http.stop(), self.grpc.stop())
        # Keyed sends whose clients gave up run on (app.idempotency): finished or cancelled before
        # what they send with and keep their answers in closes.
        await self.idempotency.close(grace_s=min(grace, 5.0))
        if self.transactions is not None:  # no more checks answered; the records stay for a restart
            await self.transactions.close()
        # The scheduler publishes through the producer and spools into the retry store: stop it first.
        await self.delay_scheduler.close(grace_s=min(grace, 5.0))
        await self.recovery.close()
        await self.replay.close(grace_s=min(grace, 5.0))
        await self.notifier.close()
        if self.msg_trace is not None:  # the last trace records, while the producer still runs
            await self.msg_trace.close()
        await close_delivery(
            self.producer, self.client, self.remoting, self.retry, self.delay, self.writer, self.kv
        )

    async def close_store(self) -> None:
        """What a stop cut short must still close: the stores' floors, the group-commit writer's queued
        writes, then RocksDB (app.shutdown.stop_within)."""
        await close_stores(self.retry, self.delay, self.writer, self.kv, anyway=True)

    async def __aenter__(self) -> Service:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# An override of the name servers for the process's lifetime (the CLI's embedded devbroker).
NamesrvOverride = Callable[[], contextlib.AbstractAsyncContextManager[tuple[str, ...]]]


@contextlib.asynccontextmanager
async def _namesrv_for(
    settings: Settings, override: NamesrvOverride | None
) -> AsyncIterator[tuple[str, ...]]:
    if override is None:
        yield settings.namesrv
        return
    async with override() as namesrv:
        yield namesrv


async def run(settings: Settings, namesrv_override: NamesrvOverride | None = None) -> int:
    """0 once stopped (SIGTERM, SIGINT), during start-up too; 1 when stopping overran the grace + 5 s."""
    stop = stop_on_signals()
    grace = settings.shutdown_grace_s
    async with _namesrv_for(settings, namesrv_override) as namesrv:
        service = Service(settings, namesrv=namesrv)
        try:
            if await start_unless_stopped(service.start(), stop):
                tune_gc()
                await stop.wait()
                log.info("stopping: draining in-flight work (grace %.0f s)", grace)
            else:
                log.info("stopping during start-up: what started is stopped (grace %.0f s)", grace)
        finally:
            stopped = await stop_within(service.stop(), grace + 5.0, service.close_store, exit_now)
    return 0 if stopped else 1


def serve(settings: Settings, namesrv_override: NamesrvOverride | None = None) -> int:
    """Run until SIGTERM/SIGINT; the exit code of `rocksidecar serve`."""
    logs.configure(settings.log_level, settings.log_format)
    return run_process(run(settings, namesrv_override))
