"""The client's use of the name servers against the Java 4.9.4 client: which name server a client asks
first, and a slow name server's refresh kept out of a send's budget while another broker can take it."""

from __future__ import annotations

from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import RequestTimeout
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.namesrv import DEFAULT_TIMEOUT_S, NameServerClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import FakeClock, ScriptedInvoker, route, send_ok

THREE = "ns1:9876;ns2:9876;ns3:9876"


async def _route_answer(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    return cmd.response(ResponseCode.SUCCESS, body=route({"broker-a": 4}).to_json())


async def test_clients_spread_their_name_server_requests_instead_of_all_asking_the_first() -> None:
    """Java 4.9.4's NettyRemotingClient starts at a random name server (namesrvIndex = a random
    initValueIndex, and updateNameServerAddressList shuffles the list), then sticks to it
    (namesrvAddrChoosed) until it fails. Ours started every client at addresses[0], so every sidecar of a
    fleet configured with the same list sent every route lookup to the first name server, and a slow
    first name server delayed every client's first lookups.

    30 independent clients pick more than one name server for their first request (all 30 picking the
    same one at random has a chance of 3 * (1/3)^30). Before: all 30 asked ns1."""
    first: list[str] = []
    for _ in range(30):
        invoker = ScriptedInvoker(_route_answer)
        ns = NameServerClient(invoker, THREE)
        await ns.get_route("T")
        await ns.get_route("T")
        assert invoker.calls[0][0] == invoker.calls[1][0]  # sticks to the one it chose (as Java)
        first.append(invoker.calls[0][0])
    assert len(set(first)) > 1, f"every client asked {first[0]} first"


class _SlowNamesrvAndBrokers:
    """Name servers ns1 and ns2; one in ``slow`` takes the whole 3 s name-server timeout (the injected
    clock moves by it) and then times out. The topic lives on broker-a and broker-b; the first broker a
    message is sent to answers TOPIC_NOT_EXIST (it lost the topic), every later send is stored."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.slow: set[str] = set()
        self.sent_to: list[str] = []

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            if addr in self.slow:
                self.clock.advance(DEFAULT_TIMEOUT_S)
                raise RequestTimeout(f"no answer from {addr} in {DEFAULT_TIMEOUT_S} s", addr=addr)
            return cmd.response(ResponseCode.SUCCESS, body=route({"broker-a": 4, "broker-b": 4}).to_json())
        if cmd.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return cmd.response(ResponseCode.SUCCESS)
        assert cmd.code == RequestCode.SEND_MESSAGE_V2, cmd.code
        self.sent_to.append(addr.split(":", maxsplit=1)[0])
        if len(self.sent_to) == 1:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist")
        return send_ok(cmd)


async def test_a_slow_name_server_does_not_cost_a_send_that_another_broker_would_take() -> None:
    """Java 4.9.4's sendDefaultImpl looks the route up once, before its attempts; a broker answering
    TOPIC_NOT_EXIST (one of its retryResponseCodes) is followed at once by the next attempt on another
    broker of the same route. Ours (Producer.with_retries, ``exc.refresh_route``) first awaited a
    name-server refresh inside the send's budget: with the name server it sticks to slow (3 s to time
    out, then ns2 answers), that refresh spent the whole default 3 s budget and the send failed after one
    attempt. Now the refresh runs in the background and is awaited only when no other broker is left.

    The send is stored by broker-b on its second attempt. Before: SendFailed after 1 attempt ("failed
    after 1 attempt(s) in 3.000 s"), broker-b never tried."""
    clock = FakeClock()
    world = _SlowNamesrvAndBrokers(clock)
    invoker = ScriptedInvoker(world)
    namesrv = NameServerClient(invoker, "ns1:9876;ns2:9876")
    producer = Producer(
        namesrv, BrokerApi(invoker), ProducerConfig(group="PG-slow-ns"), clock=clock, timer=clock
    )
    try:
        await producer.routes.get("T")  # the route is cached (broker-a and broker-b)
        asked = [c[0] for c in invoker.calls if c[1].code == RequestCode.GET_ROUTEINFO_BY_TOPIC]
        world.slow.add(asked[-1])  # the name server the client sticks to turns slow (not down)
        result = await producer.send(Message("T", b"m"))
        assert result.msg_id
        assert len(world.sent_to) == 2 and world.sent_to[1] != world.sent_to[0]
    finally:
        await producer.close()
