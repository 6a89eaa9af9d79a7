"""The brokers a client instance knows (the heartbeat's, ``broker_addrs`` for the fault table, /readyz and
metrics) are the ones some route names now: its own table's or a producer's cached routes'. Before, every
broker a send ever went to was kept (note_broker) and heartbeated every 30 s for ever, after every route
had dropped it; Java's MQClientInstance runs cleanOfflineBroker before each heartbeat round."""

from __future__ import annotations

from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import FakeClock, ScriptedInvoker, route, send_ok

TOPIC = "BrokersT"


class Cluster:
    """A name server whose route of TOPIC names ``brokers`` (any other topic: a broker of the topic's
    name); brokers that store every send and answer every heartbeat (recorded by address)."""

    def __init__(self, brokers: dict[str, int]) -> None:
        self.brokers = brokers
        self.heartbeats: list[str] = []

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = cmd.ext_fields["topic"]
            brokers = self.brokers if topic == TOPIC else {topic: 4}
            return cmd.response(ResponseCode.SUCCESS, body=route(brokers).to_json())
        if cmd.code == RequestCode.HEART_BEAT:
            self.heartbeats.append(addr)
            return cmd.response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.UNREGISTER_CLIENT:
            return cmd.response(ResponseCode.SUCCESS)
        assert cmd.code == RequestCode.SEND_MESSAGE_V2, cmd.code
        return send_ok(cmd)


def producer_of(cluster: Cluster, group: str) -> tuple[Producer, ScriptedInvoker]:
    invoker = ScriptedInvoker(cluster)
    clock = FakeClock()
    namesrv = NameServerClient(invoker, "ns:9876")
    config = ProducerConfig(group=group)
    producer = Producer(namesrv, BrokerApi(invoker), config, clock=clock, timer=clock)
    producer.instance.register_producer(group)
    return producer, invoker


async def test_a_broker_that_left_the_cluster_is_not_heartbeated_for_ever() -> None:
    cluster = Cluster({"broker-a": 4, "broker-b": 4})
    producer, invoker = producer_of(cluster, "PG-left")
    instance = producer.instance
    try:
        for i in range(8):  # round robin over both brokers' queues
            await producer.send(Message(TOPIC, b"x%d" % i))
        assert {addr for addr, _, _ in invoker.sends()} == {"broker-a:10911", "broker-b:10911"}

        cluster.brokers = {"broker-a": 4}  # broker-b is taken out of the cluster
        await producer.routes.refresh_all()  # the producer's refresh: the instance's table has it too
        info = producer.routes.cached(TOPIC)
        assert info is not None and info.brokers() == ["broker-a"]

        cluster.heartbeats.clear()
        await instance.heartbeat()
        assert cluster.heartbeats == ["broker-a:10911"], "heartbeat still goes to a broker no route names"
        assert "broker-b" not in instance.broker_addrs()
    finally:
        await producer.close()


async def test_a_broker_only_the_producers_routes_name_is_known_until_the_producer_closes() -> None:
    # The instance's table drops the least recently asked route past max_routes (another producer's or
    # a consumer's topics); the producer still sends on its cached route, so its broker stays known:
    # heartbeated, in the fault table, and where END_TRANSACTION finds it.
    cluster = Cluster({"broker-a": 4})
    producer, _ = producer_of(cluster, "PG-held")
    instance = producer.instance
    instance.max_routes = 1
    await producer.send(Message(TOPIC, b"x"))
    await instance.get_route("Other")  # asked for by someone else: TOPIC's route leaves the table
    assert list(instance._routes) == ["Other"]
    assert instance.broker_addrs() == {"broker-a": "broker-a:10911", "Other": "Other:10911"}
    await instance.heartbeat()
    assert sorted(cluster.heartbeats) == ["Other:10911", "broker-a:10911"]

    await producer.close()  # its routes are not the instance's to keep any more
    assert instance.broker_addrs() == {"Other": "Other:10911"}
