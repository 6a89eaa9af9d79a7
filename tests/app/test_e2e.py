"""End to end (issue 5): with the brokers stopped, 1 000 POSTs are answered 202; when the brokers are
back all 1 000 arrive, the store ends empty and the metrics say so. And SIGTERM drains and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from bench.common import free_port
from tests.app.conftest import Stack


async def test_thousand_posts_with_brokers_down_all_arrive_later(stack: Stack) -> None:
    await stack.http.post("/v1/messages", json={"topic": "E2E", "body": "warm"})
    await stack.stop_brokers()
    sem = asyncio.Semaphore(50)

    async def post(i: int) -> httpx.Response:
        async with sem:
            return await stack.http.post("/v1/messages", json={"topic": "E2E", "body": f"m{i}"})

    answers = await asyncio.gather(*(post(i) for i in range(1000)))
    assert {a.status_code for a in answers} == {202}
    ids = {a.json()["id"] for a in answers}
    assert len(ids) == 1000 and stack.service.retry.stats().pending == 1000
    metrics = (await stack.http.get("/metrics")).text
    assert "rocksidecar_retry_pending 1000.0" in metrics and 'outcome="spooled"} 1000.0' in metrics

    await stack.start_brokers()
    await stack.drain(timeout_s=60)
    stored = {m.uniq_key for m in stack.stored("E2E")}
    assert ids <= stored
    assert stack.service.retry.stats().pending == 0
    metrics = (await stack.http.get("/metrics")).text
    assert "rocksidecar_retry_pending 0.0" in metrics
    delivered = next(
        line
        for line in metrics.splitlines()
        if line.startswith('rocksidecar_replays_total{outcome="delivered"}')
    )
    assert float(delivered.split()[-1]) >= 1000


def test_sigterm_drains_and_exits_zero(tmp_path: Path) -> None:
    http = free_port()
    env = {
        **os.environ,
        "ROCKSIDECAR_HTTP_ADDR": f"127.0.0.1:{http}",
        "ROCKSIDECAR_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "ROCKSIDECAR_DATA_DIR": str(tmp_path),
        "ROCKSIDECAR_SHUTDOWN_GRACE_S": "5",
    }
    env.pop("ROCKSIDECAR_NAMESRV", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--devbroker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the service logs one line when it listens
            if "rocksidecar ready" in line:
                break
        r = httpx.post(f"http://127.0.0.1:{http}/v1/messages", json={"topic": "Bye", "body": "x"}, timeout=10)
        assert r.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
