"""End to end (issue 5): with the brokers stopped, 1 000 POSTs are answered 202; when the brokers are
back all 1 000 arrive, the store ends empty and the metrics say so. And SIGTERM drains and exits 0."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx

from bench.sidecar_process import sidecar_process
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
    with sidecar_process(None, tmp_path, SHUTDOWN_GRACE_S="5") as (url, proc):
        r = httpx.post(f"{url}/v1/messages", json={"topic": "Bye", "body": "x"}, timeout=10)
        assert r.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
