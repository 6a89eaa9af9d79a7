"""Delayed messages through the API (Rock-DMQ local mode): scheduled durably, published when due under
their own id with the due and publish times as properties, status and cancel, batches, and a publish
that fails falling into the retry store."""

from __future__ import annotations

import datetime as dt

from rocksidecar.delay import DELAY_DUE_AT, DELAY_PUBLISHED_AT
from tests.app.conftest import Stack


async def test_a_delayed_message_is_published_when_due_under_its_id(stack: Stack) -> None:
    before = stack.service.delay.now_ms()
    r = await stack.http.post(
        "/v1/messages",
        json={"topic": "Later", "body": "tick", "delayMs": 300, "tags": "t", "properties": {"k": "v"}},
    )
    assert r.status_code == 202
    doc = r.json()
    assert doc["status"] == "SCHEDULED" and doc["deliverAt"] >= before + 300
    status = (await stack.http.get(f"/v1/messages/{doc['id']}")).json()
    assert status["status"] == "SCHEDULED" and status["deliverAt"] == doc["deliverAt"]
    # Not before its time: the broker's store time and the publish stamp below are at or after deliverAt
    # (a check that nothing is stored yet would race a loaded machine's clock past the 300 ms).
    await stack.until_published(doc["deliverAt"])
    (msg,) = stack.stored("Later")
    assert msg.uniq_key == doc["id"] and msg.body == b"tick" and msg.tags == "t"
    assert msg.properties["k"] == "v" and int(msg.properties[DELAY_DUE_AT]) == doc["deliverAt"]
    assert int(msg.properties[DELAY_PUBLISHED_AT]) >= doc["deliverAt"]
    assert msg.store_timestamp_ms >= doc["deliverAt"]
    assert (await stack.http.get(f"/v1/messages/{doc['id']}")).json()["status"] == "SENT"
    late = await stack.http.delete(f"/v1/messages/{doc['id']}")
    assert late.status_code == 409 and late.json()["field"] == "id"


async def test_cancel_before_due_means_never_sent(stack: Stack) -> None:
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(milliseconds=400)).isoformat()
    doc = (
        await stack.http.post("/v1/messages", json={"topic": "Cancelled", "body": "x", "deliverAt": at})
    ).json()
    assert doc["status"] == "SCHEDULED"
    r = await stack.http.delete(f"/v1/messages/{doc['id']}")
    assert r.status_code == 200 and r.json() == {"id": doc["id"], "status": "CANCELLED"}
    assert (await stack.http.get(f"/v1/messages/{doc['id']}")).json()["status"] == "CANCELLED"
    await stack.until_published(doc["deliverAt"])
    assert not stack.stored("Cancelled")
    again = await stack.http.delete(f"/v1/messages/{doc['id']}")
    assert again.status_code == 200 and again.json()["status"] == "CANCELLED"  # DELETE is idempotent


async def test_a_time_in_the_past_sends_now(stack: Stack) -> None:
    r = await stack.http.post("/v1/messages", json={"topic": "Past", "body": "x", "deliverAt": 1000})
    assert r.status_code == 200 and r.json()["status"] == "SENT"


async def test_batches_schedule_their_delayed_items(stack: Stack) -> None:
    msgs = [{"topic": "BD", "body": "now"}, {"topic": "BD", "body": "later", "delayMs": 200}]
    doc = (await stack.http.post("/v1/messages:batch", json={"messages": msgs})).json()
    assert [x["status"] for x in doc["results"]] == ["SENT", "SCHEDULED"]
    assert stack.service.delay.stats().pending == 1
    await stack.until_published(doc["results"][1]["deliverAt"])
    assert sorted(m.body for m in stack.stored("BD")) == [b"later", b"now"]


async def test_a_failed_publish_falls_into_the_retry_store(stack: Stack) -> None:
    await stack.http.post("/v1/messages", json={"topic": "DF", "body": "warm"})
    doc = (await stack.http.post("/v1/messages", json={"topic": "DF", "body": "x", "delayMs": 100})).json()
    await stack.stop_brokers()
    await stack.until_published(doc["deliverAt"])
    assert stack.service.retry.stats().pending == 1  # the scheduler handed it over; nothing lost
    status = (await stack.http.get(f"/v1/messages/{doc['id']}")).json()
    assert status["status"] == "SPOOLED" and status["lastError"]
    await stack.start_brokers()
    await stack.drain()
    assert [m.uniq_key for m in stack.stored("DF") if m.body == b"x"] == [doc["id"]]


async def test_metrics_show_scheduled_messages_and_lateness(stack: Stack) -> None:
    doc = (await stack.http.post("/v1/messages", json={"topic": "DM", "body": "x", "delayMs": 100})).json()
    assert "rocksidecar_delay_scheduled 1.0" in (await stack.http.get("/metrics")).text
    await stack.until_published(doc["deliverAt"])
    text = (await stack.http.get("/metrics")).text
    assert (
        "rocksidecar_delay_scheduled 0.0" in text and "rocksidecar_delay_lateness_seconds_count 1.0" in text
    )
