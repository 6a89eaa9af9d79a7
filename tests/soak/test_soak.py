"""The soak: 20 SIGKILL and 20 SIGTERM cycles of `rocksidecar serve` under mixed load (HTTP single,
batch, ack=spool, delayed, Idempotency-Key; gRPC Send and SendBatch) while brokers go down and come
back, with a ledger of every id answered 2xx. At the end the brokers are healed, the sidecar drains its
store, and what the brokers stored is read back: no acknowledged id may be missing. Duplicates are
counted and reported (at-least-once: a message delivered while its ack could not be recorded is sent
again).

devbroker by default; with ROCKSIDECAR_TEST_NAMESRV set, the same run against a real Apache RocketMQ
4.9.4, killing brokers with real-broker.sh. ROCKSIDECAR_TEST_SOAK_CYCLES sets the cycles per signal.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import httpx
import pytest

from bench.common import devbroker_process, free_port
from bench.sidecar_process import sidecar_process
from tests.realbroker.conftest import CTL_ENV, DEFAULT_CTL, NAMESRV_ENV
from tests.soak.backends import Backend, DevBackend, RealBackend
from tests.soak.load import Ledger, Load

pytestmark = [pytest.mark.soak, pytest.mark.timeout(1800)]
CYCLES = int(os.environ.get("ROCKSIDECAR_TEST_SOAK_CYCLES", "20"))  # per signal
LOAD_S = 3.0  # load per cycle before the signal
FAST_LADDER = "retry:\n  default: {ladder_s: [0.2, 0.5, 1.0], max_retries: 10000}\n"
DRAIN_TIMEOUT_S = 300.0
FLOOR_BUG = "is above the live key"  # storage.progress: the floor passed an unacknowledged key


def pending(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(v) for v in re.findall(r"^rocksidecar_(?:retry_pending|delay_scheduled) (\S+)$", text, re.M)
    )


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


@pytest.fixture
def backend() -> Iterator[Backend]:
    namesrv = os.environ.get(NAMESRV_ENV)
    if namesrv:
        ctl = Path(os.environ.get(CTL_ENV, str(DEFAULT_CTL)))
        if not ctl.is_file():
            pytest.skip(f"the real-broker soak kills brokers with real-broker.sh ({CTL_ENV}); not at {ctl}")
        real = RealBackend(namesrv, ctl)
        try:
            yield real
        finally:
            real.heal()
        return
    with devbroker_process() as dev:
        yield DevBackend(dev)


class CycleLoad(Protocol):
    rng: random.Random

    async def run(self) -> None: ...


async def cycle_load(
    load: CycleLoad, proc: subprocess.Popen[bytes], sig: int, outage: Callable[[random.Random], str]
) -> str:
    """Load (test_soak's Load, test_key_order_soak's KeyLoad) for LOAD_S with an outage at a random
    moment, then the signal with requests in flight; the load goes on until the sidecar is gone. Returns
    the outage."""
    running = asyncio.create_task(load.run())
    first = load.rng.uniform(0.2, 0.7) * LOAD_S
    await asyncio.sleep(first)  # the soak's own wall-clock schedule, not synchronisation
    what = await asyncio.to_thread(outage, load.rng)
    await asyncio.sleep(LOAD_S - first)
    proc.send_signal(sig)
    await running
    return what


def test_soak_sigkill_and_sigterm_under_load_with_broker_outages(
    backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("ROCKSIDECAR_TEST_SOAK_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    topic = f"Soak{seed}"
    backend.prepare(topic)
    config = tmp_path / "sidecar.yaml"
    config.write_text(FAST_LADDER)
    ledger = Ledger()
    exits: Counter[str] = Counter()
    outages: Counter[str] = Counter()
    fds: list[int] = []
    floor_bugs = 0
    started = time.monotonic()
    signals = [signal.SIGKILL, signal.SIGTERM] * CYCLES
    for cycle, sig in enumerate(signals):
        grpc_addr = f"127.0.0.1:{free_port()}"
        settings = {"CONFIG": str(config), "SEND_TIMEOUT_MS": "300", "GRPC_ADDR": grpc_addr}
        # /healthz, not /readyz: a cycle may start mid-outage, when no send can succeed (not ready) but
        # the sidecar takes work and spools it, which is what the cycle exercises.
        with sidecar_process(backend.namesrv, tmp_path, ready_path="/healthz", **settings) as (url, proc):
            load = Load(url, grpc_addr, topic, ledger, lambda p=proc: p.poll() is not None, f"c{cycle}", rng)
            fds.append(open_fds(proc.pid))

            outages[asyncio.run(cycle_load(load, proc, sig, backend.outage))] += 1
            code = proc.wait(60)
        exits[f"{signal.Signals(sig).name} -> exit {code}"] += 1
        log = (tmp_path / "sidecar.log").read_text(errors="replace")
        floor_bugs += log.count(FLOOR_BUG)
        with open(tmp_path / "all-cycles.log", "a") as out:
            out.write(f"--- cycle {cycle} {signal.Signals(sig).name}\n{log}")
        if rng.random() < 0.5:
            backend.heal()
    backend.heal()
    with sidecar_process(backend.namesrv, tmp_path, CONFIG=str(config)) as (url, proc):
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while (left := pending(url)) > 0:  # another process draining its store: polling is all we have
            assert time.monotonic() < deadline, f"still {left} pending after {DRAIN_TIMEOUT_S} s"
            time.sleep(0.5)
    floor_bugs += (tmp_path / "sidecar.log").read_text(errors="replace").count(FLOOR_BUG)
    stored = backend.stored(topic)
    lost = ledger.acked - set(stored)
    report = {
        "backend": type(backend).__name__,
        "seed": seed,
        "cycles": len(signals),
        "exits": dict(exits),
        "outages": dict(outages),
        "acknowledged": len(ledger.acked),
        "stored_distinct": len(stored),
        "stored_total": sum(stored.values()),
        "lost": len(lost),
        "duplicates": sum(n - 1 for n in stored.values()),
        "stored_not_acknowledged": len(set(stored) - ledger.acked),
        "floor_bugs_logged": floor_bugs,
        "open_fds_at_start_first_last_max": [fds[0], fds[-1], max(fds)],
        "answers": dict(sorted(ledger.answers.items())),
        "client_problems": ledger.problems[:10],
        "minutes": round((time.monotonic() - started) / 60, 1),
    }
    with capsys.disabled():
        print("\nSOAK " + json.dumps(report, indent=1))
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1))
    (tmp_path / "acked.txt").write_text("\n".join(sorted(ledger.acked)))  # to re-check a failed run
    (tmp_path / "lost.txt").write_text("\n".join(sorted(lost)))
    assert not lost, (
        f"{len(lost)} of {len(ledger.acked)} acknowledged ids never reached a broker: {sorted(lost)[:10]}"
    )
    assert exits[f"SIGKILL -> exit {-signal.SIGKILL}"] == CYCLES
    assert exits["SIGTERM -> exit 0"] == CYCLES, exits
    assert floor_bugs == 0 and not ledger.problems, report
    assert len(ledger.acked) > 1000 * CYCLES // 20  # the load really ran
