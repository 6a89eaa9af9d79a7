"""DevCluster: its public surface, argument checks, broker names, and messages readable per broker."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar import devbroker
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import RemotingClient
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


async def test_host_is_where_everything_listens_and_what_routes_name(client: RemotingClient) -> None:
    # 127.0.0.2 stands in for a container's address: nothing may listen on, or name, 127.0.0.1.
    async with DevCluster(brokers=2, admin_port=0, host="127.0.0.2") as cluster:
        route = await NameServerClient(client, cluster.namesrv_addr).get_route("TBW102")
        addrs = sorted(addr for b in route.broker_datas for addr in b.broker_addrs.values())
        assert addrs == sorted(b.addr for b in cluster.brokers.values())
        assert all(addr.startswith("127.0.0.2:") for addr in [*addrs, cluster.namesrv_addr])
        assert cluster.admin_url is not None and cluster.admin_url.startswith("http://127.0.0.2:")
        b = cluster.brokers["broker-a"]
        await client.invoke(b.addr, wire.send("Hosted", 0, b"x"), 3.0)
        assert [m.body for m in b.messages("Hosted")] == [b"x"]
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", int(b.addr.rpartition(":")[2]))
