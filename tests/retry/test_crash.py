"""SIGKILL while replaying into devbroker: every message acknowledged as spooled reaches devbroker at
least once after restarts, and the store ends empty (R1, R3, R6).

devbroker runs in this process; the child replays into it through the producer. Both brokers fail
their first sends, so reschedules are in flight when the first kill lands.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.retry.keys import LANES_CF, PENDING_CF, WAITING_CF
from rocksidecar.retry.store import RetryStore
from tests.crash import cluster_with_topic, kill_twice_then_drain
from tests.retry.crash_child import TOPIC, key_of

N = 2000
CHILD = "tests.retry.crash_child"
PHASE_TIMEOUT_S = 60.0


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with cluster_with_topic(TOPIC) as cluster:
        yield cluster


async def test_sigkill_while_replaying_into_devbroker_loses_nothing(
    cluster: DevCluster, tmp_path: Path
) -> None:
    store, ns = str(tmp_path / "store"), cluster.namesrv_addr
    for broker in cluster.brokers.values():
        broker.faults.fail_next_sends(150)  # SYSTEM_ERROR: the first replays are rescheduled
    # spool N (each acknowledged once synced) and replay, SIGKILL after N/4 reached devbroker; restart,
    # SIGKILL again; restart and drain
    runs = await kill_twice_then_drain(
        CHILD, [store, ns, "spool", str(N)], [store, ns, "drain"], N, PHASE_TIMEOUT_S
    )
    acked, killed_at = runs.acked, runs.killed_at
    assert N // 4 <= killed_at < len(acked)  # killed while replaying ...
    assert runs.first_failed > 0  # ... with failed sends rescheduled on the ladder

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
        f"acked {len(acked)}; first kill after {killed_at} sends ({runs.first_failed} failed); "
        f"devbroker holds {sum(stored.values())} messages for {len(stored)} ids (duplicates allowed)"
    )


async def test_sigkill_while_replaying_keyed_messages_keeps_each_keys_order(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """The same with sharding keys (retry.lanes): each key's messages are spooled one after another, its
    first pending and the others waiting behind it. After two SIGKILLs and a drain every acknowledged one
    reached devbroker, and each key's queue holds them first stored in the order they were spooled (a
    message sent again after a kill, its ack lost, is a duplicate of the key's one then first: never one
    stored ahead of an earlier one)."""
    store, ns = str(tmp_path / "store"), cluster.namesrv_addr
    for broker in cluster.brokers.values():
        broker.faults.fail_next_sends(150)  # SYSTEM_ERROR: the first replays are rescheduled
    runs = await kill_twice_then_drain(
        CHILD, [store, ns, "keyed", str(N)], [store, ns, "drain"], N, PHASE_TIMEOUT_S
    )
    # Killed while replaying (a key's messages spooled one after another may still be spooling then:
    # those the kill cut short were never acknowledged)
    assert runs.killed_at >= N // 4 and len(runs.acked) > runs.killed_at
    stored = [
        (m.queue_id, name, m.queue_offset, m.uniq_key)
        for name, broker in cluster.brokers.items()
        for m in broker.messages(TOPIC)
        if m.uniq_key
    ]
    assert sorted(runs.acked - {id_ for *_, id_ in stored}) == []
    by_key: dict[str, list[str]] = {}
    for *_, id_ in sorted(stored):
        firsts = by_key.setdefault(key_of(id_), [])
        if id_ not in firsts:
            firsts.append(id_)
    for key, firsts in by_key.items():
        assert firsts == sorted(firsts), f"{key}'s messages were stored out of their order: {firsts}"
    reopened = RetryStore.open(store)
    try:
        assert reopened.pending_count == 0 and reopened.lanes_open == 0
        assert reopened.kv.count(WAITING_CF) == 0 and reopened.kv.count(LANES_CF) == 0
    finally:
        await reopened.close()
