"""A name server restarted empty answers TOPIC_NOT_EXIST for every topic (TBW102 too) until the brokers
register again (up to 30 s), and the client sticks to it (it answers). A cached topic's route is kept
through that, as Java 4.9.4's updateTopicRouteInfoFromNameServer keeps it on the exception, and is never
swapped for the template. Before, one refresh round in that window dropped the route of every topic in
use, and every send failed with no route while its broker was up."""

from __future__ import annotations

import random

from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import FakeClock, ScriptedInvoker, route, send_ok
from tests.rmq.producer.test_routes import Change, scripted

TOPIC = "RestartT"


class RestartingNamesrvs:
    """Two name servers that both know TOPIC; one in ``empty`` has restarted and knows nothing."""

    def __init__(self) -> None:
        self.empty: set[str] = set()
        self.asked: list[str] = []

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            self.asked.append(addr)
            if addr in self.empty:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, "No topic route info in name server")
            return cmd.response(ResponseCode.SUCCESS, body=route({"broker-a": 4}).to_json())
        if cmd.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return cmd.response(ResponseCode.SUCCESS)
        assert cmd.code == RequestCode.SEND_MESSAGE_V2, cmd.code
        return send_ok(cmd)


async def test_a_restarted_name_server_does_not_take_away_the_route_of_a_topic_in_use() -> None:
    namesrvs = RestartingNamesrvs()
    invoker = ScriptedInvoker(namesrvs)
    # The client starts at a random name server (as Java's); this seed has it start at ns1, the one that
    # restarts below.
    namesrv = NameServerClient(invoker, "ns1:9876;ns2:9876", rng=random.Random(1))
    clock = FakeClock()
    config = ProducerConfig(group="PG-restart")
    producer = Producer(namesrv, BrokerApi(invoker), config, clock=clock, timer=clock)
    try:
        await producer.send(Message(TOPIC, b"before"))
        namesrvs.empty.add("ns1:9876")  # ns1 restarted; the brokers have not registered with it yet
        await producer.routes.refresh_all()  # the 30 s refresh falls in that window
        assert namesrvs.asked[-1] == "ns1:9876"
        assert producer.route_known(TOPIC), "the route of a topic in use was dropped"
        assert producer.instance.broker_addrs() == {"broker-a": "broker-a:10911"}  # still heartbeated
        result = await producer.send(Message(TOPIC, b"after"))  # broker-a is up all along
        assert result.msg_id
    finally:
        await producer.close()


async def test_a_topic_with_a_route_of_its_own_is_never_swapped_for_the_template() -> None:
    # The name server half re-registered: TBW102 known again (broker-b registered), T not yet (its
    # broker-a has not): sending T through the template would create it on broker-b.
    answers: dict[str, bytes | None] = {"T": route({"a": 4}).to_json()}
    asked: list[str] = []
    routes = scripted(answers, asked)
    changes: list[Change] = []
    routes._on_change = lambda topic, before, after: changes.append((topic, before, after))
    await routes.get("T")
    answers["T"] = None
    answers["TBW102"] = route({"b": 8}, perm=7).to_json()
    await routes.refresh_all()
    info = routes.cached("T")
    assert info is not None and info.brokers() == ["a"] and not info.auto_create
    assert "TBW102" not in asked
    assert changes == [("T", None, ("a",))]  # the route's arrival, nothing since


async def test_a_topic_sent_through_the_template_keeps_it_while_the_name_server_knows_nothing() -> None:
    answers: dict[str, bytes | None] = {"TBW102": route({"b": 8}, perm=7).to_json()}
    asked: list[str] = []
    routes = scripted(answers, asked)
    await routes.get("New")  # no route of its own yet: the template (the broker creates it on send)
    answers.clear()  # the name server restarted empty: TBW102 unknown too
    await routes.refresh_all()
    info = routes.cached("New")
    assert info is not None and info.auto_create and info.brokers() == ["b"]
    assert asked[-2:] == ["New", "TBW102"]  # asked, and the template too, as before
