"""TopicRoutes against a scripted name server: the 30 s refresh of every cached topic, and what a route
that exists but has no writable queue does to the cache and to the route listener."""

from __future__ import annotations

import random

import orjson
import pytest

from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import RouteNotFound
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.producer.routes import TopicRoutes
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import FakeClock, ScriptedInvoker, route

# A route whose only address has a port of a non-ASCII digit: '²' passes str.isdigit, not int().
SUPERSCRIPT_PORT = orjson.dumps(
    {
        "queueDatas": [{"brokerName": "a", "perm": 6, "readQueueNums": 4, "writeQueueNums": 4}],
        "brokerDatas": [{"brokerName": "a", "cluster": "c", "brokerAddrs": {"0": "10.0.0.1:\u00b2"}}],
    }
)

Change = tuple[str, tuple[str, ...] | None, tuple[str, ...]]


def scripted(answers: dict[str, bytes | None], asked: list[str]) -> TopicRoutes:
    """Routes whose name server answers ``answers[topic]`` (None: TOPIC_NOT_EXIST)."""

    async def answer(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
        topic = cmd.ext_fields["topic"]
        asked.append(topic)
        body = answers.get(topic)
        if body is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for {topic}"
            )
        return cmd.response(ResponseCode.SUCCESS, body=body)

    ns = NameServerClient(ScriptedInvoker(answer), "ns:9876")
    return TopicRoutes(ns, sleep=FakeClock().sleep, rng=random.Random(1))


async def test_one_topic_whose_route_turns_bad_does_not_stop_the_refresh_of_the_others() -> None:
    # Before: the bad route raised ValueError, which ended the round (and failed it) before B.
    answers: dict[str, bytes | None] = {"A": route({"a": 4}).to_json(), "B": route({"a": 4}).to_json()}
    asked: list[str] = []
    routes = scripted(answers, asked)
    await routes.get("A")
    await routes.get("B")
    answers["A"] = SUPERSCRIPT_PORT  # A's route turns bad ...
    answers["B"] = route({"a": 4, "b": 4}).to_json()  # ... and B gains a broker
    await routes._refresher.run_once()  # one round of the 30 s refresh
    assert asked[-2:] == ["A", "B"] and routes._refresher.failures == 0
    b = routes.cached("B")
    assert b is not None and b.brokers() == ["a", "b"]
    a = routes.cached("A")
    assert a is not None and a.master_addr("a") == "a:10911"  # the route known before stays in use


async def test_a_cached_topic_made_read_only_is_dropped_and_its_return_is_told() -> None:
    answers: dict[str, bytes | None] = {
        "T": route({"a": 4}).to_json(),
        "TBW102": route({"a": 8, "b": 8}, perm=7).to_json(),
    }
    asked: list[str] = []
    routes = scripted(answers, asked)
    changes: list[Change] = []
    routes._on_change = lambda topic, before, after: changes.append((topic, before, after))
    await routes.get("T")
    answers["T"] = route({"a": 4}, perm=4).to_json()  # updateTopicPerm -p 4
    await routes.refresh_all()
    assert routes.cached("T") is None and routes.topics() == []  # as Java replaces it: no stale sends
    with pytest.raises(RouteNotFound, match=r"'T' has no writable queue .*a not writable \(perm 4\)"):
        await routes.get("T")
    assert "TBW102" not in asked  # never created elsewhere through the template
    answers["T"] = route({"a": 4}).to_json()
    info = await routes.get("T")
    assert info.ok and not info.auto_create
    # The route appearing again is what brings the spooled messages forward.
    assert changes == [("T", None, ("a",)), ("T", None, ("a",))]
