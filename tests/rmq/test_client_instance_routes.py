"""The client instance's route table keeps what its producers and consumers ask for, no more: a route nobody
asked for in ten minutes is dropped at the next heartbeat, past max_routes the least recently asked for
goes, and a subscribed topic's route stays whatever happens. Before, every topic any client of the sidecar
named stayed for ever (and the producer's route cache with it)."""

from __future__ import annotations

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import Message
from rocksidecar.rmq.broker import ConsumerData, Subscription
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import FakeClock, ScriptedInvoker, route

TEN_MINUTES_S = 600.0


class Namesrv:
    """Each topic's route has a broker of its own (topic "A": broker "A" at A:10911); the name server
    can be made unreachable. Heartbeats are answered and recorded by address."""

    def __init__(self) -> None:
        self.down = False
        self.heartbeats: list[str] = []

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.HEART_BEAT:
            self.heartbeats.append(addr)
            return cmd.response(ResponseCode.SUCCESS)
        assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
        if self.down:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "name server busy")
        topic = cmd.ext_fields["topic"]
        return cmd.response(ResponseCode.SUCCESS, body=route({topic: 4}).to_json())


def instance_of(ns: Namesrv, clock: FakeClock, **kw: float) -> ClientInstance:
    return ClientInstance(NameServerClient(ScriptedInvoker(ns), "ns:9876"), clock=clock, **kw)  # type: ignore[arg-type]


def subscribing(instance: ClientInstance, group: str, *topics: str) -> None:
    async def on_request(conn: object, cmd: RemotingCommand) -> None:
        return None

    data = ConsumerData(group, tuple(Subscription(t) for t in topics))
    instance.register_consumer(group, lambda: data, on_request)  # type: ignore[arg-type]


async def test_a_route_nobody_asked_for_in_ten_minutes_is_dropped_but_a_subscribed_one_stays() -> None:
    ns, clock = Namesrv(), FakeClock()
    instance = instance_of(ns, clock)
    subscribing(instance, "CG", "S")
    for topic in ("A", "B", "S"):
        await instance.get_route(topic)
    clock.advance(TEN_MINUTES_S - 1)
    await instance.get_route("A")  # the producer's 30 s refresh of a topic it keeps
    clock.advance(2)
    await instance.heartbeat()
    assert sorted(instance.broker_addrs()) == ["A", "S"]  # B: asked for ten minutes ago, by nobody since
    assert sorted(ns.heartbeats) == ["A:10911", "S:10911"]
    clock.advance(10 * TEN_MINUTES_S)  # the consumer stopped asking (e.g. its refresh fails): still kept
    await instance.heartbeat()
    assert sorted(instance.broker_addrs()) == ["S"]


async def test_asking_while_the_name_server_is_down_keeps_the_route() -> None:
    ns, clock = Namesrv(), FakeClock()
    instance = instance_of(ns, clock)
    await instance.get_route("A")
    ns.down = True
    for _ in range(40):  # twenty minutes of 30 s refresh rounds that fail
        clock.advance(30)
        try:
            await instance.get_route("A")
        except RocketMQError:
            pass
        await instance.heartbeat()
    assert sorted(instance.broker_addrs()) == ["A"]  # its brokers still get the heartbeat


async def test_past_max_routes_the_least_recently_asked_for_goes_never_a_subscribed_one() -> None:
    ns, clock = Namesrv(), FakeClock()
    instance = instance_of(ns, clock, max_routes=2)
    subscribing(instance, "CG", "S")
    await instance.get_route("S")
    for topic in ("A", "B", "C", "D"):
        clock.advance(1)
        await instance.get_route(topic)
        assert len(instance.broker_addrs()) <= 2
    assert sorted(instance.broker_addrs()) == ["D", "S"]


async def test_distinct_topics_sent_leave_bounded_route_tables(cluster: DevCluster) -> None:
    # A client naming a new topic in each message (no ROCKSIDECAR_TOPICS): every name stayed in the
    # producer's route cache and in the instance's route table, refreshed every 30 s.
    instance = ClientInstance(cluster.namesrv_addr)
    producer = Producer(instance.namesrv, instance.api, ProducerConfig(group="PG-many"), instance=instance)
    producer.routes.max_topics = instance.max_routes = 100  # the defaults (10 000), smaller
    try:
        await producer.start()
        for start in range(0, 1000, 250):
            msgs = [Message(f"many-{start + i}", b"x") for i in range(250)]
            results = await producer.send_batch(msgs)
            assert not [r for r in results if isinstance(r, Exception)]
        assert len(producer.routes.topics()) == 100
        await producer.routes.refresh_all()  # the 30 s round: the topics the broker created since
        assert len(producer.routes.topics()) == 100
        assert 100 - 1 <= len(instance._routes) <= 100  # the cached topics' routes, and TBW102's
    finally:
        await producer.close()
        await instance.close()
