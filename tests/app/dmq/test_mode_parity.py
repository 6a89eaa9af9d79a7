"""Rock-DMQ's two modes against each other (delay_mode local vs service): a spooled cancel reaches its
message's inner queue, a status names the app's topic in both, and the Status fields each mode answers
are the ones README (Status and cancel) states."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.app.lookups import RetryLookup
from rocksidecar.app.sidecar import Status
from tests.app.conftest import Stack
from tests.app.dmq.conftest import dmq_settings
from tests.app.dmq.test_dmq_service_mode import create_on_every_broker, until

INNER = "dmq_parity_inner"
TOPIC = "DmqParity"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
REQUEST: dict[str, Any] = {
    "topic": TOPIC,
    "body": {"n": 1},
    "tags": "paid",
    "keys": ["order-7", "cust-3"],
    "properties": {"tenant": "t1", "region": "eu"},
    "shardingKey": "cust-3",
}


async def _post(stack: Stack, delay_ms: int, **extra: Any) -> dict[str, Any]:
    r = await stack.http.post(
        "/v1/messages", json={**REQUEST, "delayMs": delay_ms, **extra}, headers={"traceparent": TRACEPARENT}
    )
    assert r.status_code == 202, r.text
    doc: dict[str, Any] = r.json()
    assert doc["status"] == "SCHEDULED"
    return doc


def _cancels_spooled(stack: Stack) -> list[Any]:
    """The records in the sidecar's retry store that are Rock-DMQ cancels."""
    retry = stack.service.retry
    out = []
    key = retry.first_pending()
    while key is not None:
        record = retry.pending_record(key)
        if record is not None and record.properties.get(inner.OP) == inner.OP_CANCEL:
            out.append(record)
        key = retry.first_pending(key + b"\x00")
    return out


async def test_a_cancel_spooled_in_service_mode_goes_to_the_inner_queue_of_its_message(
    make_stack: Callable[..., Any],
) -> None:
    """README (Rock-DMQ service mode): a cancel is "sent with the same sharding key" as its message, "so
    that a cancel for it reaches the same inner queue and so the same replica". The sidecar's direct
    cancel does so; one spooled because no broker took it (200 CANCELLED all the same) is replayed with
    the cancel message's own fresh id as its sharding key: another inner queue, another replica."""
    async with make_stack(delay_mode="service", dmq_inner_topic=INNER) as stack:
        await create_on_every_broker(stack, INNER)
        doc = await _post(stack, 60_000)  # on the broker: the inner message is not in the retry store
        await stack.stop_brokers()
        r = await stack.http.delete(f"/v1/messages/{doc['id']}")
        assert r.status_code == 200 and r.json()["status"] == "CANCELLED", r.text
        (cancel,) = _cancels_spooled(stack)
        assert cancel.properties[inner.CANCEL_ID] == doc["id"]
        assert cancel.sharding_key == doc["id"], (cancel.sharding_key, cancel.id, doc["id"])


async def test_retry_lookup_names_the_apps_topic_and_due_time_of_a_forwarded_message(
    make_stack: Callable[..., Any],
) -> None:
    """The retry store holds the inner message (on the inner topic) of a message forwarded while no broker
    took it: the retry lookup given the forwarder's records answers SPOOLED with the app's topic and the
    deliverAt its 202 named; an id the forwarder does not know keeps the retry store's own topic."""
    async with make_stack(delay_mode="service", dmq_inner_topic=INNER) as stack:
        await stack.stop_brokers()
        doc = await _post(stack, 60_000)
        forwarder = stack.service.forwarder
        assert forwarder is not None
        lookup = RetryLookup(stack.service.retry.get, forwarded=forwarder.forwarded)
        found = await lookup.state(doc["id"])
        assert found is not None
        assert (found.status, found.topic, found.deliver_at_ms) == (Status.SPOOLED, TOPIC, doc["deliverAt"])
        # a plain spooled message (not forwarded): the topic it was sent to, no deliverAt
        r = await stack.http.post("/v1/messages", json={"topic": TOPIC, "body": {"n": 2}})
        assert r.status_code == 202 and r.json()["status"] == "SPOOLED", r.text
        plain = await lookup.state(r.json()["id"])
        assert plain is not None and (plain.topic, plain.deliver_at_ms) == (TOPIC, None)
        # without the forwarder's records: the inner topic, as before
        bare = await RetryLookup(stack.service.retry.get).state(doc["id"])
        assert bare is not None and bare.topic == INNER


# app/assembly.py (not this task's to edit) builds RetryLookup(self.retry.get) without the forwarder's
# records: once it passes ``forwarded=self.forwarder.forwarded`` in service mode, this passes; strict, so
# that it then fails until the mark is removed.
async def test_status_of_a_message_forwarded_while_brokers_are_down_names_the_apps_topic(
    make_stack: Callable[..., Any],
) -> None:
    """Local mode answers GET with the app's topic (SCHEDULED, topic, deliverAt). Service mode, while the
    inner message waits in the retry store, answers SPOOLED (README) with the app's topic, not the
    internal inner topic the app never sent to, and the deliverAt its 202 named."""
    async with make_stack(delay_mode="service", dmq_inner_topic=INNER) as stack:
        await stack.stop_brokers()
        doc = await _post(stack, 60_000)
        assert stack.service.retry.stats().pending == 1  # spooled: no broker took the inner message
        status = (await stack.http.get(f"/v1/messages/{doc['id']}")).json()
        assert status["status"] in ("SPOOLED", "SCHEDULED"), status
        assert status.get("topic") == TOPIC, status
        assert status.get("deliverAt") == doc["deliverAt"], status


async def _lifecycle(stack: Stack, wait_published: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    a = await _post(stack, 60_000)
    seen["answer"] = a
    seen["scheduled"] = (await stack.http.get(f"/v1/messages/{a['id']}")).json()
    r = await stack.http.delete(f"/v1/messages/{a['id']}")
    seen["cancel"] = (r.status_code, r.json())
    seen["cancelled"] = (await stack.http.get(f"/v1/messages/{a['id']}")).json()
    r = await stack.http.delete(f"/v1/messages/{a['id']}")
    seen["cancel2"] = (r.status_code, r.json())
    b = seen["answer_b"] = await _post(stack, 300)
    await wait_published(b)
    seen["sent"] = (await stack.http.get(f"/v1/messages/{b['id']}")).json()
    r = await stack.http.delete(f"/v1/messages/{b['id']}")
    seen["late"] = (r.status_code, r.json())
    r = await stack.http.delete("/v1/messages/7F0000014E727A511BDC95FB77F9054B")
    seen["unknown"] = (r.status_code, r.json())
    return seen


async def test_status_answers_have_the_fields_readme_states_for_each_mode(
    make_stack: Callable[..., Any], tmp_path: Path
) -> None:
    """The same delayed request, cancelled and published, asked about by id in each mode. README (Status
    and cancel) states each mode's fields: what both answer alike is asserted equal; where they differ,
    the difference is exactly the documented one. Both name the topic and deliverAt. Local mode's SENT
    and CANCELLED come from its done markers, which keep when and where (broker, queueId, queueOffset,
    msgId) besides the topic and due time; service mode's come from the sidecar's record of what it
    forwarded (topic, due time): the service publishes it, so when and where it went out is not known
    here, and its SENT names no sentAt (the due time is its deliverAt, not when it went out)."""
    async with make_stack() as stack:
        local = await _lifecycle(stack, lambda d: stack.until_published(d["deliverAt"]))
    async with make_stack(delay_mode="service", dmq_inner_topic=INNER) as stack:
        await create_on_every_broker(stack, INNER)
        options = DmqOptions(inner_topic=INNER, group="dmq_parity_group", http_addr="127.0.0.1:0")
        dmq = DmqService(dmq_settings(stack.cluster.namesrv_addr, tmp_path / "dmq"), options)
        await dmq.start()
        try:

            async def published(d: dict[str, Any]) -> None:
                await until(lambda: any(m.uniq_key == d["id"] for m in stack.stored(TOPIC)))

            service = await _lifecycle(stack, published)
        finally:
            await dmq.stop()
    # what agrees
    assert local["answer"].keys() == service["answer"].keys()
    assert local["scheduled"].keys() == service["scheduled"].keys()
    for name in ("cancel", "cancel2", "late", "unknown"):
        assert local[name][0] == service[name][0], name
    assert local["cancelled"]["status"] == service["cancelled"]["status"] == "CANCELLED"
    assert local["sent"]["status"] == service["sent"]["status"] == "SENT"
    # the documented contract of each mode (README, Status and cancel)
    assert set(local["cancelled"]) == {"id", "status", "cancelledAt", "topic", "deliverAt"}, local
    assert set(service["cancelled"]) == {"id", "status", "cancelledAt", "topic", "deliverAt"}, service
    assert set(local["sent"]) == {
        "id", "status", "sentAt", "broker", "queueId", "queueOffset", "msgId", "topic", "deliverAt",
    }, local  # fmt: skip
    assert set(service["sent"]) == {"id", "status", "topic", "deliverAt"}, service
    for mode in (local, service):  # the topic and the due time, as answered
        assert mode["cancelled"]["topic"] == mode["sent"]["topic"] == TOPIC
        assert mode["cancelled"]["deliverAt"] == mode["answer"]["deliverAt"]
        assert mode["sent"]["deliverAt"] == mode["answer_b"]["deliverAt"]
