"""/readyz says whether a send can succeed now (issue 17 item 8): a broker with a writable route that is
not isolated, and the reason when there is none."""

from __future__ import annotations

from typing import Any

from rocksidecar.app.readiness import masters
from tests.app.conftest import Stack


async def _isolate_every_broker(stack: Stack) -> None:
    for broker in stack.cluster.brokers.values():
        broker.faults.fail_all_sends(1, "down for the test")
    r = await stack.http.post("/v1/messages", json={"topic": "Ready", "body": "x"})
    assert r.status_code == 202  # every attempt failed: spooled
    states = {b["broker"]: b["state"] for b in (await stack.http.get("/readyz")).json()["brokers"]}
    assert set(states.values()) == {"isolated"}, states


async def test_every_broker_isolated_is_not_ready_and_says_why(stack: Stack) -> None:
    ready = await stack.http.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["writableBrokers"] == sorted(stack.cluster.brokers)
    await _isolate_every_broker(stack)
    ready = await stack.http.get("/readyz")
    assert ready.status_code == 503 and ready.json()["nameServer"] == "reachable"
    assert "every broker is isolated" in ready.json()["reason"] and ready.json()["writableBrokers"] == []
    for broker in stack.cluster.brokers.values():
        broker.faults.clear()
    await stack.start_brokers()  # marks them recovered, as the recovery probe would
    assert (await stack.http.get("/readyz")).status_code == 200


async def test_configured_topics_need_a_usable_broker_each(make_stack: Any) -> None:
    async with make_stack(topics=("Ready",)) as stack:
        ready = await stack.http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["routes"] == {"Ready": sorted(stack.cluster.brokers)}
        await _isolate_every_broker(stack)
        ready = await stack.http.get("/readyz")
        assert ready.status_code == 503 and "no broker to send Ready to" in ready.json()["reason"]


async def test_no_name_server_is_the_reason(make_stack: Any) -> None:
    async with make_stack(namesrv=("127.0.0.1:1",)) as stack:
        ready = await stack.http.get("/readyz")
        assert ready.status_code == 503 and "name server is unreachable" in ready.json()["reason"]


def test_masters_read_integer_and_string_broker_ids() -> None:
    table = {
        "brokerAddrTable": {
            "a": {"brokerAddrs": {0: "1:1", 1: "1:2"}},
            "b": {"brokerAddrs": {"0": "2:1"}},
            "slave-only": {"brokerAddrs": {"1": "3:2"}},
        }
    }
    assert masters(table) == {"a", "b"}
    assert masters({}) == set()
