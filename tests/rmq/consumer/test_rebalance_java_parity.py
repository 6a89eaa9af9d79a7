"""The push consumer's rebalance against Java 4.9.4 (RebalanceImpl / RebalancePushImpl,
MQClientInstance), as a broker and the Java members of the group see it: the default point a
CONSUME_FROM_TIMESTAMP consumer searches is fixed when the consumer is built, and the heartbeat and
unregistration reach a broker's slaves too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import ConsumerData, Subscription
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.consumer import push_consumer as push_consumer_mod
from rocksidecar.rmq.consumer import rebalance as rebalance_mod
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData
from tests.fakes import ScriptedInvoker
from tests.rmq.consumer.helpers import Recorder, send_to_queues
from tests.rmq.consumer.test_pull_from_slave import RouteRewriting

MIN = 60_000
T0 = 1_700_000_000_000  # the wall clock when the consumer is built and started


# Java 4.9.4, DefaultMQPushConsumer: the field initialiser
#   consumeTimestamp = UtilAll.timeMillisToHumanString3(System.currentTimeMillis() - (1000 * 60 * 30));
# runs once, when the consumer object is built; RebalancePushImpl.computePullFromWhereWithException
# (CONSUME_FROM_TIMESTAMP, no committed offset, not a retry topic) parses that same string for every
# queue it ever adds. The point searched is therefore fixed for the consumer's life.
def java_default_consume_timestamp(built_at_ms: int) -> int:
    return built_at_ms - 30 * MIN


@pytest.fixture
async def clock(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[int]]:
    now = [T0]
    monkeypatch.setattr(rebalance_mod, "wall_ms", lambda: now[0])
    monkeypatch.setattr(push_consumer_mod, "wall_ms", lambda: now[0])
    yield now


async def test_the_default_consume_timestamp_is_fixed_when_the_consumer_is_made_not_per_queue(
    clock: list[int],
) -> None:
    """A queue without a committed offset, added two hours after start (a topic subscribed then, or
    queues added to a topic), by a CONSUME_FROM_TIMESTAMP consumer without an explicit timestamp: Java
    searches start - 30 min and consumes the queue's messages of the last 1.5 h; here the search is
    made at "now - 30 min" and those messages are skipped, never delivered."""
    async with DevCluster(brokers=1, queues=1, now_ms=lambda: clock[0]) as cluster:
        await send_to_queues(cluster, "RbA", 1, queues=1)
        rec = Recorder()
        cfg = ConsumerConfig(
            "GRb-ts", instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.TIMESTAMP
        )
        consumer = PushConsumer(cfg, cluster.namesrv_addr, rec)
        consumer.subscribe("RbA")
        await consumer.start()
        try:
            # Topic RbB: a message at T0 + 10 min (expired by retention since: the queue no longer
            # starts at 0, so the broker has no offset to offer), then two at T0 + 60 min.
            clock[0] = T0 + 10 * MIN
            await send_to_queues(cluster, "RbB", 1, queues=1)
            clock[0] = T0 + 60 * MIN
            await send_to_queues(cluster, "RbB", 2, queues=1)
            broker = cluster.brokers["broker-a"]
            assert broker.store.expire("RbB", 0, 1) == 1
            clock[0] = T0 + 120 * MIN
            consumer.subscribe("RbB")
            await consumer.refresh_routes()
            await consumer.rebalance()
            java = broker.store.search_offset("RbB", 0, java_default_consume_timestamp(T0))
            assert java == 1  # Java's consumer starts the queue at its first message still stored
            # the queue's last message (offset 2) reaches the listener either way; what came before it?
            await rec.until(lambda got: any(m.topic == "RbB" and m.queue_offset == 2 for m in got))
            delivered = sorted(m.queue_offset for m in rec.got if m.topic == "RbB")
            assert delivered == [1, 2], f"RbB offsets delivered: {delivered}; Java's consumer gets [1, 2]"
        finally:
            await consumer.close()


# Java 4.9.4, MQClientInstance.sendHeartbeatToAllBroker: with a consumer group in the heartbeat, every
# address of every broker in brokerAddrTable gets it, slaves included (only a producer-only heartbeat
# skips the ids other than MASTER_ID).
def java_heartbeat_addrs(broker_addrs: dict[int, str], has_consumers: bool) -> set[str]:
    return {a for i, a in broker_addrs.items() if has_consumers or i == 0}


def _member(group: str, name: str, client: RemotingClient, cluster: DevCluster) -> PushConsumer:
    cfg = ConsumerConfig(
        group,
        instance_name=name,
        client_ip="127.0.0.1",
        consume_from=ConsumeFrom.FIRST_OFFSET,
        rebalance_interval_s=3600,
    )
    consumer = PushConsumer(cfg, cluster.namesrv_addr, Recorder(), client=client)
    client._on_request = consumer.on_broker_request
    return consumer


async def test_the_consumer_heartbeat_reaches_the_brokers_slaves_too() -> None:
    """Java members heartbeat a broker's slaves as well as its master, and while the master is down a
    Java member asks a slave for the group's members (findConsumerIdList). This member heartbeats masters
    only: a slave never learns of it, so the Java members, asking the slave while the master is down,
    share every queue among themselves, and this member, still holding its queues (pulled from the
    slave), consumes them a second time."""
    async with DevCluster(brokers=1, queues=4) as cluster, DevCluster(brokers=1, queues=4) as other:
        master = cluster.brokers["broker-a"].addr
        slave = other.brokers["broker-a"]  # another process, listed as broker-a's slave
        route = {0: master, 1: slave.addr}
        assert slave.addr in java_heartbeat_addrs(route, has_consumers=True)
        await send_to_queues(cluster, "RbHb", 1)
        client = RouteRewriting({"broker-a": route})
        consumer = _member("GRb-hb", "one", client, cluster)
        consumer.subscribe("RbHb")
        await consumer.start()
        try:
            await consumer.heartbeat()
            assert cluster.brokers["broker-a"].clients.consumer_ids("GRb-hb") == [consumer.client_id]
            assert slave.clients.consumer_ids("GRb-hb") == [consumer.client_id], (
                "the slave never got this member's heartbeat"
            )
        finally:
            await consumer.close()


async def test_with_the_master_down_a_members_queues_pass_to_the_member_left() -> None:
    """Two members of a group; broker-a's master goes down (its slave stays listed) and one member leaves.
    Java's remaining member asks the slave for the members (findConsumerIdList -> selectBrokerAddr), which
    knows both from their heartbeats and the leaver's unregistration, and takes every queue. Here the
    slave never heard of either member: it answers none, the allocation is kept, and the leaver's half
    of the queues is consumed by nobody until the master is back."""
    async with DevCluster(brokers=1, queues=4) as cluster, DevCluster(brokers=1, queues=4) as other:
        master = cluster.brokers["broker-a"].addr
        slave = other.brokers["broker-a"]  # another process, listed as broker-a's slave
        await send_to_queues(cluster, "RbLeave", 1)
        clients = [RouteRewriting({"broker-a": {0: master, 1: slave.addr}}) for _ in range(2)]
        members = [
            _member("GRb-leave", name, c, cluster) for name, c in zip(("one", "two"), clients, strict=True)
        ]
        for m in members:
            m.subscribe("RbLeave")
            await m.start()
        stay, leave = members
        try:
            await stay.rebalance()  # after the second member's arrival
            assert len([q for q in stay.queues if q.topic == "RbLeave"]) == 2
            for c in clients:
                c.rewrite["broker-a"] = {1: slave.addr}  # the master left the route
            for m in members:
                await m.refresh_routes()
            await leave.close()
            await stay.rebalance()
            mine = {q for q in stay.queues if q.topic == "RbLeave"}
            assert len(mine) == 4, f"queues of the member that left are consumed by nobody: {sorted(mine)}"
        finally:
            for m in members:
                await m.close()


# The rule of sendHeartbeatToAllBroker and unregisterClient itself, on scripted brokers: broker "bk" has a
# master and a slave whose answer waits until the test lets it go (then fails), so the master's heartbeat
# must be sent and answered while the slave's is still pending.
MASTER, SLAVE = "m-master:10911", "a-slave:10911"  # the slave's address sorts first


class SlowSlave:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.master_answered = asyncio.Event()
        self.release_slave = asyncio.Event()

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            route = TopicRouteData(
                (QueueData("bk", 4, 4, 6),), (BrokerData("c", "bk", {0: MASTER, 1: SLAVE}),)
            )
            return cmd.response(ResponseCode.SUCCESS, body=route.to_json())
        self.calls.append((cmd.code, addr))
        if addr == SLAVE:
            await self.release_slave.wait()
            return cmd.response(ResponseCode.SYSTEM_ERROR, "slave busy")
        self.master_answered.set()
        return cmd.response(ResponseCode.SUCCESS)


def _instance(brokers: SlowSlave) -> ClientInstance:
    namesrv = NameServerClient(ScriptedInvoker(brokers), "ns:9876")
    return ClientInstance(namesrv, client_id="127.0.0.1@hb")


async def _with_slave_held(brokers: SlowSlave, call: asyncio.Task[None]) -> None:
    """The master answered while the slave's request was still pending; then the slave fails."""
    await asyncio.wait_for(brokers.master_answered.wait(), 5)
    assert not call.done()
    brokers.release_slave.set()
    await asyncio.wait_for(call, 5)  # the slave's failure is logged, not raised


async def test_a_consumer_heartbeat_goes_to_every_node_at_once_a_producer_only_one_to_masters() -> None:
    brokers = SlowSlave()
    instance = _instance(brokers)
    await instance.get_route("T")
    instance.register_producer("PG")
    brokers.release_slave.set()
    await instance.heartbeat()
    assert brokers.calls == [(RequestCode.HEART_BEAT, MASTER)], "a producer-only heartbeat skips slaves"

    brokers.calls.clear()
    brokers.master_answered.clear()
    brokers.release_slave.clear()
    data = ConsumerData("CG", (Subscription("T"),))

    async def on_request(conn: object, cmd: RemotingCommand) -> None:
        return None

    instance.register_consumer("CG", lambda: data, on_request)
    await _with_slave_held(brokers, asyncio.create_task(instance.heartbeat()))
    assert sorted(brokers.calls) == [(RequestCode.HEART_BEAT, SLAVE), (RequestCode.HEART_BEAT, MASTER)]


async def test_unregistering_goes_to_every_node_at_once() -> None:
    brokers = SlowSlave()
    instance = _instance(brokers)
    await instance.get_route("T")
    leave = asyncio.create_task(instance.unregister(producer_group="PG"))  # a producer's too (Java)
    await _with_slave_held(brokers, leave)
    assert sorted(brokers.calls) == [
        (RequestCode.UNREGISTER_CLIENT, SLAVE),
        (RequestCode.UNREGISTER_CLIENT, MASTER),
    ]
