"""A running sidecar (Service on ephemeral ports) over an in-process devbroker, and an HTTP client."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.rocketmq import MessageExt
from app.service import COLUMN_FAMILIES, Service
from bench.common import REPO, free_port
from devbroker import DevCluster
from retry.policy import RetryPolicy
from storage.rocks import RocksKV
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


@contextmanager
def sidecar_process(data_dir: Path, **env: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`rocksidecar serve --devbroker` as a child process; yields it and its HTTP base URL once
    /healthz answers."""
    http = free_port()
    full = {
        **os.environ,
        "ROCKSIDECAR_HTTP_ADDR": f"127.0.0.1:{http}",
        "ROCKSIDECAR_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "ROCKSIDECAR_DATA_DIR": str(data_dir),
        **env,
    }
    full.pop("ROCKSIDECAR_NAMESRV", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--devbroker"],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 30
        while True:  # another process coming up: polling is the only way to see it
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the sidecar did not start"
            time.sleep(0.05)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
