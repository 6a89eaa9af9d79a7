"""A running sidecar (Service on ephemeral ports) over an in-process devbroker, and an HTTP client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocksidecar.app.config import Settings
from rocksidecar.app.service import COLUMN_FAMILIES, Service
from rocksidecar.devbroker import DevCluster
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq import MessageExt
from rocksidecar.storage.rocks import RocksKV
from tests.fakes import FaultyKV

FAST_LADDER = RetryPolicy((0.05, 0.1, 0.2, 0.5), 1000)  # the real ladder starts at 3 s; never exhausted here


@dataclass
class Stack:
    cluster: DevCluster
    service: Service
    http: httpx.AsyncClient
    kv: FaultyKV

    def stored(self, topic: str) -> list[MessageExt]:
        """Every message devbroker holds for ``topic``, on any broker."""
        return [m for b in self.cluster.brokers.values() for m in b.messages(topic)]

    async def stop_brokers(self) -> None:
        for broker in self.cluster.brokers.values():
            await broker.stop()

    async def start_brokers(self) -> None:
        for broker in self.cluster.brokers.values():
            await broker.start()
        for name in self.cluster.brokers:  # what the recovery probe would do on its next tick
            self.service.producer.fault.mark_recovered(name)

    async def until_published(self, due_ms: int, timeout_s: float = 20.0) -> None:
        """Wait for the delay scheduler to publish everything due by ``due_ms``."""
        async with asyncio.timeout(timeout_s):
            wait_ms = due_ms - self.service.delay.now_ms()
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000 + 0.001)  # the message's own due time, not a guess
            await self.service.delay_scheduler.wait_idle()

    async def drain(self, timeout_s: float = 20.0) -> None:
        """Wait until the retry store is empty: idle replays, then the ladder's next due time."""
        async with asyncio.timeout(timeout_s):
            while True:
                await self.service.replay.wait_idle()
                stats = self.service.retry.stats()
                if not stats.pending:
                    return
                wait_ms = (stats.oldest_due_ms or 0) - self.service.retry.now_ms()
                await asyncio.sleep(max(wait_ms, 1) / 1000)  # the ladder's own timing, not a guess


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    base = Settings(
        http_addr="127.0.0.1:0",
        grpc_addr="127.0.0.1:0",
        data_dir=str(tmp_path / "data"),
        retry_default=FAST_LADDER,
        send_timeout_ms=1000,
    )
    return replace(base, **overrides)


@pytest.fixture
def make_stack(tmp_path: Path) -> Callable[..., Any]:
    """``async with make_stack(**settings) as stack`` — a fresh sidecar and devbroker."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[Stack]:
        async with DevCluster(brokers=2, queues=4) as cluster:
            settings = settings_for(tmp_path, **{"namesrv": (cluster.namesrv_addr,), **overrides})
            (tmp_path / "data").mkdir(exist_ok=True)
            kv = FaultyKV(RocksKV.open(tmp_path / "data" / "store", COLUMN_FAMILIES))
            service = Service(settings, kv=kv)  # type: ignore[arg-type]
            await service.start()
            headers = {"authorization": f"Bearer {settings.auth_token}"} if settings.auth_token else {}
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{service.http.port}", headers=headers, timeout=30
            ) as http:
                try:
                    yield Stack(cluster, service, http, kv)
                finally:
                    await service.stop()

    return make


@pytest.fixture
async def stack(make_stack: Callable[..., Any]) -> AsyncIterator[Stack]:
    async with make_stack() as s:
        yield s


@pytest.fixture
def held_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store is held open by this process, standing in for a running sidecar: RocksDB then says the
    LOCK is held by the current process, which storage.rocks._open_released waits out (~0.75 s and four
    full collections an open, seconds in the whole suite) as a reopen of our own. A sidecar in another
    process gets its answer at once; so do these tests."""
    monkeypatch.setattr("rocksidecar.storage.rocks.RELEASE_WAITS_S", ())


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged as an error, or with a traceback: the hostile-input tests want none."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
