"""TopicRoutes against a scripted name server: the 30 s refresh of every cached topic, what a route
that exists but has no writable queue does to the cache and to the route listener, and what the cache
keeps of the topics clients name (any valid name without ROCKSIDECAR_TOPICS): before, every topic stayed
for ever, refreshed every round, and a name without a route left its send index behind."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import RouteNotFound, TopicNotExist
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


def scripted(answers: dict[str, bytes | None], asked: list[str], **kw: Any) -> TopicRoutes:
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
    return TopicRoutes(ns, sleep=FakeClock().sleep, rng=random.Random(1), **kw)


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


ROUTE = route({"a": 4}).to_json()


def held(routes: TopicRoutes) -> int:
    """Entries in the routes' own tables: what they keep per topic."""
    return sum(len(v) for v in vars(routes).values() if isinstance(v, (dict, set, list)))


def send_lookup(routes: TopicRoutes, topic: str) -> None:
    """What a send does first: Producer.with_retries looks the topic up through ``cached`` and marks it
    used."""
    assert routes.cached(topic) is not None
    routes.used.add(topic)


async def test_names_without_a_route_leave_nothing_behind() -> None:
    # no topic and no TBW102 (no broker auto-creates): every name is refused
    routes = scripted({}, [])
    for i in range(2000):
        with pytest.raises(TopicNotExist):
            await routes.get(f"typo-{i}")
    assert routes.topics() == []
    assert held(routes) == 0  # before: a send index for each of the 2000 names


async def test_a_topic_not_sent_to_for_ten_minutes_is_forgotten_and_asked_for_again_when_it_is() -> None:
    asked: list[str] = []
    routes = scripted({"busy": ROUTE, "idle": ROUTE}, asked)
    await routes.get("busy")
    await routes.get("idle")
    index = routes.cached("busy").index  # type: ignore[union-attr]
    for _ in range(20):  # 30 s refresh rounds: the first ends the one "idle" was asked for in
        send_lookup(routes, "busy")
        await routes.refresh_all()
    assert routes.topics() == ["idle", "busy"]  # least recently used first
    assert asked[-2:] == ["idle", "busy"]  # both refreshed so far
    send_lookup(routes, "busy")
    await routes.refresh_all()  # 20 rounds (10 min) since, without a send to "idle"
    assert routes.topics() == ["busy"] and asked[-1] == "busy"
    assert routes.cached("idle") is None
    assert routes.cached("busy").index is index  # type: ignore[union-attr]  # kept across refreshes
    await routes.get("idle")  # its next send asks the name server again
    assert asked[-1] == "idle" and routes.topics() == ["busy", "idle"]


async def test_a_look_is_no_use_and_a_pinned_topic_stays() -> None:
    # Readiness looks at every cached topic at each probe (cached): were that a use, the probes alone would
    # keep every topic for ever. The topics the settings name are pinned: readiness asks about them.
    routes = scripted({"looked": ROUTE, "pinned": ROUTE, "sent": ROUTE}, [], refresh_s=30.0, idle_s=60.0)
    routes.pin(["pinned"])
    for topic in ("looked", "pinned", "sent"):
        await routes.get(topic)
    for _ in range(3):  # the round they were asked for in, then two (60 s)
        for topic in routes.topics():
            assert routes.cached(topic) is not None
        send_lookup(routes, "sent")
        await routes.refresh_all()
    assert sorted(routes.topics()) == ["pinned", "sent"]


async def test_past_max_topics_the_least_recently_used_goes() -> None:
    answers: dict[str, bytes | None] = {t: ROUTE for t in "ABCDEFG"}
    routes = scripted(answers, [], max_topics=3)
    for topic in "ABC":
        await routes.get(topic)
    send_lookup(routes, "A")
    await routes.refresh_all()  # A was used since: it goes to the end
    await routes.get("D")
    assert routes.topics() == ["C", "A", "D"]
    for topic in "EFG":  # a burst of new names: the cache never grows past the cap
        await routes.get(topic)
        assert len(routes.topics()) == 3
    assert routes.topics() == ["E", "F", "G"]
    assert held(routes) <= 3 * 3  # per cached topic: its info, its last use, its count of lookups
