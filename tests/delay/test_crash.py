"""SIGKILL while delayed messages are falling due: every message acknowledged as scheduled reaches
devbroker at least once after restarts, never before its due time, and the store ends with no pending
keys (D2).

devbroker runs in this process; the child publishes into it through the producer. Both brokers fail
their first sends, so failed publishes are waiting for their retry when the first kill lands.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rocksidecar.delay import COLUMN_FAMILIES, DELAY_DUE_AT, DELAY_PUBLISHED_AT, DelayState, DelayStore
from rocksidecar.delay.keys import DUE_CF, INDEX_CF
from rocksidecar.devbroker import DevCluster
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.rocks import RocksKV
from tests.crash import cluster_with_topic, kill_twice_then_drain
from tests.delay.crash_child import TOPIC

N = 2000
SPREAD_MS = 1500  # due times spread over this, so the kill lands while messages are falling due
CHILD = "tests.delay.crash_child"
PHASE_TIMEOUT_S = 60.0


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with cluster_with_topic(TOPIC) as cluster:
        yield cluster


async def test_sigkill_while_messages_fall_due_loses_nothing(cluster: DevCluster, tmp_path: Path) -> None:
    store_dir, ns = str(tmp_path / "store"), cluster.namesrv_addr
    for broker in cluster.brokers.values():
        broker.faults.fail_next_sends(20)  # SYSTEM_ERROR: the first publishes fail and wait for a retry
    # schedule N (each acknowledged once synced) and publish as they fall due, SIGKILL after N/4
    # reached devbroker; restart (overdue messages first), SIGKILL again; restart and drain
    first = [store_dir, ns, "schedule", str(N), str(SPREAD_MS)]
    runs = await kill_twice_then_drain(CHILD, first, [store_dir, ns, "drain"], N, PHASE_TIMEOUT_S)
    acked, killed_at = runs.acked, runs.killed_at
    assert N // 4 <= killed_at < len(acked)  # killed while publishing ...
    assert runs.first_failed > 0  # ... with failed publishes waiting for their retry

    stored = [m for broker in cluster.brokers.values() for m in broker.messages(TOPIC)]
    ids = Counter(m.uniq_key for m in stored if m.uniq_key)
    missing = sorted(acked - set(ids))
    assert missing == [], f"{len(missing)} acknowledged messages never reached devbroker: {missing[:5]}"
    assert len(acked) == N
    early = [
        m.uniq_key for m in stored if int(m.properties[DELAY_PUBLISHED_AT]) < int(m.properties[DELAY_DUE_AT])
    ]
    assert early == []
    kv = RocksKV.open(store_dir, COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    try:
        assert kv.count(DUE_CF) == kv.count(INDEX_CF) == 0
        assert store.stats().pending == 0
        states = Counter(s.state for s in map(store.get, sorted(acked)) if s is not None)
        assert states == {DelayState.SENT: N}
    finally:
        await store.close()
        await writer.close()
        kv.close()
    print(
        f"acked {len(acked)}; first kill after {killed_at} publishes ({runs.first_failed} failed); "
        f"devbroker holds {len(stored)} messages for {len(ids)} ids (duplicates allowed)"
    )
