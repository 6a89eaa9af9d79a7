"""SIGKILL while replaying into devbroker: every message acknowledged as spooled reaches devbroker at
least once after restarts, and the store ends empty (R1, R3, R6).

devbroker runs in this process; the child replays into it through the producer. Both brokers fail
their first sends, so reschedules are in flight when the first kill lands.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.rocketmq import BrokerApi, RemotingClient
from devbroker import DevCluster
from retry.keys import PENDING_CF
from retry.store import RetryStore
from tests.crash import Child
from tests.retry.crash_child import TOPIC

N = 2000
CHILD = "tests.retry.crash_child"
PHASE_TIMEOUT_S = 60.0


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
    first = Child(CHILD, acked, sent)
    running = asyncio.create_task(first.run(store, ns, "spool", str(N)))
    await asyncio.wait_for(first.kill_when(N // 4), PHASE_TIMEOUT_S)
    await running
    assert first.proc is not None and first.proc.returncode == -signal.SIGKILL
    killed_at = sum(sent.values())
    assert N // 4 <= killed_at < len(acked)  # killed while replaying ...
    assert first.failed > 0  # ... with failed sends rescheduled on the ladder
    # 2: restart and replay; SIGKILL again
    second = Child(CHILD, acked, sent)
    running = asyncio.create_task(second.run(store, ns, "drain"))
    await asyncio.wait_for(second.kill_when(killed_at + N // 4), PHASE_TIMEOUT_S)
    await running
    # 3: restart and drain to the end
    third = Child(CHILD, acked, sent)
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
