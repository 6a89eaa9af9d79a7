"""The promise end to end: with both brokers down, the sidecar answers 2xx (spooled or scheduled) for
messages sent over HTTP, and is SIGKILLed while requests are still in flight. Restarted on the same
store with the brokers back, every message it answered 2xx reaches the broker."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.common import DevbrokerProcess, devbroker_process
from bench.sidecar_process import sidecar_process
from tests.pipeline.sidecar_process import Sidecar

TOPIC = "CrashTest"
FAST_LADDER = "retry:\n  default: {ladder_s: [0.2, 0.5, 1.0], max_retries: 1000}\n"


def request(i: int) -> tuple[str, dict[str, str], object]:
    """A mix of what clients send: ack=broker (spooled, the brokers being down), ack=spool, batches, and
    short delays."""
    kind = i % 4
    if kind == 0:
        return "/v1/messages", {}, {"topic": TOPIC, "body": f"single {i}"}
    if kind == 1:
        return "/v1/messages", {"ack": "spool"}, {"topic": TOPIC, "body": f"spool {i}"}
    if kind == 2:
        return (
            "/v1/messages:batch",
            {},
            {"messages": [{"topic": TOPIC, "body": f"batch {i}.{k}"} for k in range(5)]},
        )
    return "/v1/messages", {}, {"topic": TOPIC, "body": f"delayed {i}", "delayMs": 300}


async def fire_until_killed(url: str, kill: asyncio.Event, acked: set[str]) -> None:
    """Post requests from 16 connections; once 200 were answered, set ``kill`` and keep posting."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        n = 0

        async def worker() -> None:
            nonlocal n
            while True:
                n += 1
                path, params, body = request(n)
                try:
                    r = await http.post(path, params=params, json=body)
                except httpx.HTTPError:
                    return  # the sidecar is gone
                if r.status_code in (200, 202):
                    doc = r.json()
                    items = doc.get("results", [doc])
                    acked.update(x["id"] for x in items if x["status"] in ("SENT", "SPOOLED", "SCHEDULED"))
                if len(acked) >= 200:
                    kill.set()

        await asyncio.gather(*(worker() for _ in range(16)))


def pending(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(
        float(v) for v in re.findall(r"^rocksidecar_(?:retry_pending|delay_scheduled) (\S+)$", text, re.M)
    )


def stop_brokers(dev: DevbrokerProcess, action: str) -> None:
    for broker in ("broker-a", "broker-b"):
        dev.act(broker, action)


def test_sigkill_with_requests_in_flight_loses_nothing_it_answered(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text(FAST_LADDER)
    acked: set[str] = set()
    with devbroker_process() as dev:
        with sidecar_process(dev.namesrv, tmp_path, CONFIG=str(config), SEND_TIMEOUT_MS="300") as (url, proc):
            assert httpx.post(f"{url}/v1/messages", json={"topic": TOPIC, "body": "warm"}).status_code == 200
            stop_brokers(dev, "stop")

            async def run() -> None:
                kill = asyncio.Event()
                load = asyncio.create_task(fire_until_killed(url, kill, acked))
                await kill.wait()
                proc.kill()  # SIGKILL, with requests still in flight
                await load

            asyncio.run(run())
            assert proc.wait(10) == -9
        assert len(acked) >= 200
        # Between the kill and the restart, the spooled messages are in the store (not yet anywhere else).
        stats = subprocess.run(
            [
                sys.executable,
                "-m",
                "rocksidecar.app.cli",
                "store",
                "--data-dir",
                str(tmp_path / "store"),
                "stats",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        spooled = int(re.search(r"^pending: (\d+)$", stats, re.M).group(1))  # type: ignore[union-attr]
        assert spooled > 0, stats

        stop_brokers(dev, "start")
        with sidecar_process(dev.namesrv, tmp_path, CONFIG=str(config)) as (url, _):
            deadline = time.monotonic() + 60
            while pending(url) > 0:  # another process draining its store: polling is all we have
                assert time.monotonic() < deadline, f"still pending after 60 s: {pending(url)}"
                time.sleep(0.2)
        stored = {m.uniq_key for m in Sidecar(url, dev.namesrv).pull(TOPIC)}
    lost = acked - stored
    assert not lost, f"{len(lost)} of {len(acked)} messages answered 2xx never reached the broker"
