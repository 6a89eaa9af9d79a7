"""ClientRegistry: who is told NOTIFY_CONSUMER_IDS_CHANGED and when, unregistering, closed connections,
and expiry after 120 s on an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from rocksidecar.devbroker.clients import ClientRegistry
from rocksidecar.rmq.broker import java_string_hash
from rocksidecar.rmq.connection import Connection


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Connection, str]] = []

    def __call__(self, conn: Connection, group: str) -> None:
        self.calls.append((conn, group))


class FakeClock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def beat(
    client_id: str, group: str = "cg", topics: tuple[str, ...] = ("T",), expr: str = "*"
) -> dict[str, Any]:
    subs = [{"topic": t, "subString": expr} for t in topics]
    return {"clientID": client_id, "consumerDataSet": [{"groupName": group, "subscriptionDataSet": subs}]}


@pytest.fixture
def setup() -> tuple[ClientRegistry, Recorder, FakeClock]:
    notify, clock = Recorder(), FakeClock()
    return ClientRegistry(notify, clock=clock), notify, clock


def test_a_joining_member_notifies_every_member(setup: tuple[ClientRegistry, Recorder, FakeClock]) -> None:
    reg, notify, _ = setup
    c1, c2 = Connection("c1"), Connection("c2")
    reg.heartbeat(c1, beat("id1"))
    assert notify.calls == [(c1, "cg")]
    notify.calls.clear()
    reg.heartbeat(c1, beat("id1"))  # a plain refresh changes nothing
    assert notify.calls == []
    reg.heartbeat(c2, beat("id2"))
    assert sorted(c.addr for c, _ in notify.calls) == ["c1", "c2"]
    assert reg.consumer_ids("cg") == ["id1", "id2"]


def test_a_changed_topic_set_notifies(setup: tuple[ClientRegistry, Recorder, FakeClock]) -> None:
    reg, notify, _ = setup
    c1 = Connection("c1")
    reg.heartbeat(c1, beat("id1"))
    notify.calls.clear()
    reg.heartbeat(c1, beat("id1", topics=("T", "U")))
    assert notify.calls == [(c1, "cg")]


def test_leaving_notifies_the_remaining_members(setup: tuple[ClientRegistry, Recorder, FakeClock]) -> None:
    reg, notify, _ = setup
    c1, c2, c3 = Connection("c1"), Connection("c2"), Connection("c3")
    for conn in (c1, c2, c3):
        reg.heartbeat(conn, beat(conn.addr))
    notify.calls.clear()
    reg.unregister("c1", None, "cg")
    assert sorted(c.addr for c, _ in notify.calls) == ["c2", "c3"]
    notify.calls.clear()
    reg.connection_closed(c2)
    assert notify.calls == [(c3, "cg")] and reg.consumer_ids("cg") == ["c3"]
    notify.calls.clear()
    reg.unregister("nobody", None, "cg")
    reg.unregister("c3", "pg", "other")
    assert notify.calls == []


def test_registrations_expire_after_120_s_without_heartbeat(
    setup: tuple[ClientRegistry, Recorder, FakeClock],
) -> None:
    reg, notify, clock = setup
    old, fresh = Connection("old"), Connection("fresh")
    reg.heartbeat(old, beat("old") | {"producerDataSet": [{"groupName": "pg"}]})
    clock.now = 100.0
    reg.heartbeat(fresh, beat("fresh"))
    notify.calls.clear()
    clock.now = 120.0
    assert reg.scan_expired() == set()
    clock.now = 120.5
    assert reg.scan_expired() == {old}
    assert reg.consumer_ids("cg") == ["fresh"] and notify.calls == [(fresh, "cg")]
    assert reg.groups() == {"producer": [], "consumer": ["cg"]}


def test_subscriptions_keep_tag_codes(setup: tuple[ClientRegistry, Recorder, FakeClock]) -> None:
    reg, _, _ = setup
    reg.heartbeat(Connection("c"), beat("c", expr="A || B"))
    sub = reg.subscription("cg", "T")
    assert sub is not None and sub.codes == frozenset({java_string_hash("A"), java_string_hash("B")})
    assert reg.subscription("cg", "U") is None and reg.subscription("nope", "T") is None


@pytest.mark.parametrize("doc", [{}, {"clientID": "x", "consumerDataSet": [{"subscriptionDataSet": []}]}])
def test_malformed_heartbeats_are_refused(
    setup: tuple[ClientRegistry, Recorder, FakeClock], doc: dict[str, Any]
) -> None:
    reg, _, _ = setup
    with pytest.raises(ValueError):
        reg.heartbeat(Connection("c"), doc)


def test_a_subscription_is_replaced_only_by_a_newer_sub_version(
    setup: tuple[ClientRegistry, Recorder, FakeClock],
) -> None:
    """As ConsumerGroupInfo.updateSubscription: an equal or older subVersion keeps the one held, so two
    members beating different expressions do not take turns."""
    reg, _, _ = setup
    c1, c2 = Connection("c1"), Connection("c2")

    def versioned(client_id: str, expr: str, version: int) -> dict[str, Any]:
        doc = beat(client_id, expr=expr)
        doc["consumerDataSet"][0]["subscriptionDataSet"][0]["subVersion"] = version
        return doc

    reg.heartbeat(c1, versioned("id1", "a", 2000))
    reg.heartbeat(c2, versioned("id2", "b", 2000))
    reg.heartbeat(c2, versioned("id2", "c", 1000))
    held = reg.subscription("cg", "T")
    assert held is not None and (held.expression, held.sub_version) == ("a", 2000)
    reg.heartbeat(c2, versioned("id2", "d", 3000))
    held = reg.subscription("cg", "T")
    assert held is not None and (held.expression, held.sub_version) == ("d", 3000)
    reg.heartbeat(c1, beat("id1", topics=("U",)))  # a topic the beat no longer names goes
    assert reg.subscription("cg", "T") is None and reg.subscription("cg", "U") is not None
