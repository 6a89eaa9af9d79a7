"""SIGKILL while replaying into devbroker: every message acknowledged as spooled reaches devbroker at
least once after restarts, and the store ends empty (R1, R3, R6).

devbroker runs in this process; the child replays into it through the producer. Both brokers fail
their first sends, so reschedules are in flight when the first kill lands.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.rocketmq import BrokerApi, RemotingClient
from devbroker import DevCluster
from retry.keys import PENDING_CF
from retry.store import RetryStore
from tests.retry.crash_child import TOPIC

N = 2000
ROOT = Path(__file__).resolve().parents[2]
PHASE_TIMEOUT_S = 60.0


class Child:
    """One run of crash_child; ``sent`` counts what devbroker confirmed, across runs."""

    def __init__(self, acked: set[str], sent: Counter[str]) -> None:
        self.acked, self.sent = acked, sent
        self.failed = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.progress = asyncio.Event()
        self.drained = False

    async def run(self, *args: str) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.retry.crash_child", *args,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            word, _, id_ = line.decode().strip().partition(" ")
            if word == "acked":
                self.acked.add(id_)
            elif word == "sent":
                self.sent[id_] += 1
            elif word == "failed":
                self.failed += 1
            self.drained = self.drained or word == "drained"
            self.progress.set()
        await self.proc.wait()

    async def kill_when(self, sent_total: int) -> None:
        while sum(self.sent.values()) < sent_total:
            self.progress.clear()
            await self.progress.wait()
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=2, queues=4) as cluster:
        client = RemotingClient()
        api = BrokerApi(client, producer_group="setup")
        for broker in cluster.brokers.values():
            await api.create_topic(broker.addr, TOPIC)
        await client.close()
        yield cluster


async def test_sigkill_while_replaying_into_devbroker_loses_nothing(
    cluster: DevCluster, tmp_path: Path
) -> None:
    store, ns = str(tmp_path / "store"), cluster.namesrv_addr
    acked: set[str] = set()
    sent: Counter[str] = Counter()
    for broker in cluster.brokers.values():
        broker.faults.fail_next_sends(150)  # SYSTEM_ERROR: the first replays are rescheduled
    # 1: spool N (each acknowledged once synced) and replay; SIGKILL after N/4 reached devbroker
    first = Child(acked, sent)
    running = asyncio.create_task(first.run(store, ns, "spool", str(N)))
    await asyncio.wait_for(first.kill_when(N // 4), PHASE_TIMEOUT_S)
    await running
    assert first.proc is not None and first.proc.returncode == -signal.SIGKILL
    killed_at = sum(sent.values())
    assert N // 4 <= killed_at < len(acked)  # killed while replaying ...
    assert first.failed > 0  # ... with failed sends rescheduled on the ladder
    # 2: restart and replay; SIGKILL again
    second = Child(acked, sent)
    running = asyncio.create_task(second.run(store, ns, "drain"))
    await asyncio.wait_for(second.kill_when(killed_at + N // 4), PHASE_TIMEOUT_S)
    await running
    # 3: restart and drain to the end
    third = Child(acked, sent)
    await asyncio.wait_for(third.run(store, ns, "drain"), PHASE_TIMEOUT_S)
    assert third.drained and third.proc is not None and third.proc.returncode == 0

    stored = Counter(
        m.uniq_key for broker in cluster.brokers.values() for m in broker.messages(TOPIC) if m.uniq_key
    )
    missing = sorted(acked - set(stored))
    assert missing == [], f"{len(missing)} acknowledged messages never reached devbroker: {missing[:5]}"
    assert len(acked) == N
    reopened = RetryStore.open(store)
    try:
        assert reopened.kv.count(PENDING_CF) == 0
        assert reopened.dead_count == 0
    finally:
        await reopened.close()
    print(
        f"acked {len(acked)}; first kill after {killed_at} sends ({first.failed} failed); "
        f"devbroker holds {sum(stored.values())} messages for {len(stored)} ids (duplicates allowed)"
    )
