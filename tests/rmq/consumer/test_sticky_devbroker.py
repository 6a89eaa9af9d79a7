"""Sticky allocation on devbroker: members read each other's queues through the broker
(GET_CONSUMER_RUNNING_INFO forwarded to the client, as 4.9.4's AdminBrokerProcessor.callConsumer) and a
departure moves exactly the leaver's queues (issue 13, seed 003: 4 clients, 24 queues)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.consumer.bounded_hash import bounded_assignment
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.consumer.running_info import owned_queues
from rocksidecar.rmq.consumer.sticky import AllocateSticky
from rocksidecar.rmq.errors import BrokerSystemError
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import Recorder, owned, send_to_queues, start
from tests.rmq.consumer.sticky_helpers import owners, settle_all

TOPIC = "StickyT"


@pytest.fixture
async def big() -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=2, queues=12) as c:  # 24 queues, as seed 003
        yield c


async def _create_topic(cluster: DevCluster) -> None:
    client = RemotingClient()
    try:
        for broker in cluster.brokers.values():
            await BrokerApi(client).create_topic(broker.addr, TOPIC, read_queue_nums=12, write_queue_nums=12)
    finally:
        await client.close()


def config(name: str) -> ConsumerConfig:
    return ConsumerConfig(
        "G-sticky",
        consume_from=ConsumeFrom.FIRST_OFFSET,
        instance_name=name,
        client_ip="127.0.0.1",
        allocate=AllocateSticky(),
    )


async def test_a_departure_moves_exactly_the_leavers_queues_and_ends_8_8_8(
    big: DevCluster, consumers: list[PushConsumer]
) -> None:
    await _create_topic(big)
    members = [await start(consumers, big, config(f"s{i}"), Recorder(), topic=TOPIC) for i in range(4)]
    await settle_all(members, TOPIC, 24)
    assert sorted(len(owned(m, TOPIC)) for m in members) == [6, 6, 6, 6]
    before = {mq: ids[0] for mq, ids in owners(members, TOPIC).items()}
    leaver = sorted(members, key=lambda m: m.client_id)[1]  # seed 003: client 2 leaves
    rest = [m for m in members if m is not leaver]
    added = {m.client_id: m.stats[f"queues_added:{TOPIC}"] for m in rest}

    await leaver.close()  # unregisters: the brokers notify the rest, who rebalance
    for m in rest:  # each has rebalanced at least once since (the notification) ...
        await m.stats.reach("rebalances_done", m.stats["rebalances_done"] + 1)
    await settle_all(rest, TOPIC, 24)  # ... and converged without any further move, as the counts show

    after = {mq: ids[0] for mq, ids in owners(rest, TOPIC).items()}
    assert sorted(Counter(after.values()).values()) == [8, 8, 8]
    assert sum(1 for mq in after if after[mq] != before[mq]) == 6
    created = sum(m.stats[f"queues_added:{TOPIC}"] - added[m.client_id] for m in rest)
    assert created == 6  # process queues built: only the leaver's six, nothing rebuilt elsewhere


async def test_without_holdings_the_group_still_settles_on_the_stateless_assignment(
    big: DevCluster, consumers: list[PushConsumer]
) -> None:
    # A broker that does not forward 307: every read fails, so members fall back to BoundedHash (had
    # they counted the silent members as owning nothing, each would keep its own queues and take the
    # "orphans" too, and the overlap would never end).
    for broker in big.brokers.values():
        del broker._handlers[RequestCode.GET_CONSUMER_RUNNING_INFO]
    await _create_topic(big)
    members = [await start(consumers, big, config(f"s{i}"), Recorder(), topic=TOPIC) for i in range(4)]
    await settle_all(members, TOPIC, 24)
    ids = sorted(m.client_id for m in members)
    expected = bounded_assignment(sorted(owners(members, TOPIC)), ids)
    assert {mq: o[0] for mq, o in owners(members, TOPIC).items()} == expected


async def test_the_broker_forwards_running_info_to_the_client(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1)
    a = await start(consumers, cluster, config("a"), Recorder(), topic=TOPIC)
    b = await start(consumers, cluster, config("b"), Recorder(), topic=TOPIC)
    await settle_all([a, b], TOPIC, 8)
    addr = cluster.brokers["broker-a"].addr
    body = await a.api.get_consumer_running_info(addr, "G-sticky", b.client_id)
    assert owned_queues(body, TOPIC) == owned(b, TOPIC)
    assert b'"allocateMessageQueueStrategy":"STICKY"' in body
    with pytest.raises(BrokerSystemError, match="not online"):
        await a.api.get_consumer_running_info(addr, "G-sticky", "10.9.9.9@nobody")
    # The client refuses a group it is not in, as Java's ClientRemotingProcessor does.
    cmd = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "other", "clientId": "x"})
    resp = await b.on_broker_request(None, cmd)  # type: ignore[arg-type]
    assert resp is not None and resp.code == ResponseCode.SYSTEM_ERROR and "not exist" in (resp.remark or "")
