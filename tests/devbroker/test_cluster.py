"""DevCluster: its public surface, argument checks, broker names, and messages readable per broker."""

from __future__ import annotations

import pytest

import devbroker
from app.rocketmq.pool import RemotingClient
from devbroker import DevCluster
from tests.devbroker import wire


def test_public_surface() -> None:
    assert devbroker.__all__ == sorted(devbroker.__all__)
    assert all(hasattr(devbroker, name) for name in devbroker.__all__)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"brokers": 0}, "brokers"), ({"brokers": 27}, "brokers"), ({"queues": 0}, "queues")],
)
def test_bad_arguments(kwargs: dict[str, int], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        DevCluster(**kwargs)


async def test_brokers_are_named_and_listen_on_distinct_ports(client: RemotingClient) -> None:
    async with DevCluster(brokers=3, queues=2) as cluster:
        assert list(cluster.brokers) == ["broker-a", "broker-b", "broker-c"]
        assert len({b.addr for b in cluster.brokers.values()} | {cluster.namesrv_addr}) == 4
        assert all(b.topics.get("TBW102").write_queue_nums == 2 for b in cluster.brokers.values())  # type: ignore[union-attr]
        c = cluster.brokers["broker-c"]
        for queue_id in (1, 0, 1):
            await client.invoke(c.addr, wire.send("Spread", queue_id, str(queue_id).encode()), 3.0)
        assert [m.body for m in c.messages("Spread")] == [b"0", b"1", b"1"]  # queue order
        assert cluster.admin_url is None
