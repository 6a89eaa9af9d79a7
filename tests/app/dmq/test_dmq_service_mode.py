"""ROCKSIDECAR_DELAY_MODE=service end to end on devbroker: the sidecar forwards delayed requests to the
inner topic (or spools them while no broker takes them), a `dmq` service publishes them when due; status
and cancel by id keep working."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.delay import DelayedMessage, DelayState
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.pool import RemotingClient
from tests.app.conftest import Stack
from tests.app.dmq.conftest import dmq_settings

INNER = "dmq_e2e_inner"
TOPIC = "DmqE2E"
POLL_S = 0.05


async def until(done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Wait for devbroker's or the service's state (both change in other tasks that expose no event)."""
    async with asyncio.timeout(timeout_s):
        while not done():  # noqa: ASYNC110 - the state lives in another component with no event
            await asyncio.sleep(POLL_S)


async def create_on_every_broker(stack: Stack, topic: str) -> None:
    """As an operator creates the inner topic (README): on every broker up front. Left to auto-creation, a
    broker holds the topic only from its first inner message on, and a consumer sees that broker's queues
    only at its next route refresh (30 s, as Java): the test raced it when the spooled message was the
    first to land on the second broker."""
    client = RemotingClient()
    try:
        for broker in stack.cluster.brokers.values():
            await BrokerApi(client).create_topic(broker.addr, topic, read_queue_nums=4, write_queue_nums=4)
    finally:
        await client.close()


def published(stack: Stack, id_: str) -> int:
    return sum(m.uniq_key == id_ for m in stack.stored(TOPIC))


async def post_delayed(stack: Stack, body: str, delay_ms: int) -> dict[str, Any]:
    r = await stack.http.post("/v1/messages", json={"topic": TOPIC, "body": body, "delayMs": delay_ms})
    assert r.status_code == 202, r.text
    doc: dict[str, Any] = r.json()
    assert doc["status"] == "SCHEDULED"
    return doc


async def test_service_mode_forwards_schedules_cancels_and_spools(
    make_stack: Callable[..., Any], tmp_path: Path
) -> None:
    async with make_stack(delay_mode="service", dmq_inner_topic=INNER) as stack:
        await create_on_every_broker(stack, INNER)
        kept = await post_delayed(stack, "kept", 1500)
        gone = await post_delayed(stack, "gone", 1500)
        assert {m.uniq_key for m in stack.stored(INNER)} == {kept["id"], gone["id"]}  # on the broker
        assert stack.service.delay.stats().pending == 0  # nothing waits in the sidecar's own store
        status = (await stack.http.get(f"/v1/messages/{kept['id']}")).json()
        assert status["status"] == "SCHEDULED" and status["deliverAt"] == kept["deliverAt"]
        r = await stack.http.delete(f"/v1/messages/{gone['id']}")
        assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
        assert (await stack.http.get(f"/v1/messages/{gone['id']}")).json()["status"] == "CANCELLED"

        options = DmqOptions(inner_topic=INNER, group="dmq_e2e_group", http_addr="127.0.0.1:0")
        dmq = DmqService(dmq_settings(stack.cluster.namesrv_addr, tmp_path / "dmq"), options)
        await dmq.start()
        try:
            await until(lambda: published(stack, kept["id"]) == 1)
            (out,) = [m for m in stack.stored(TOPIC) if m.uniq_key == kept["id"]]
            assert out.body == b"kept" and out.store_timestamp_ms >= kept["deliverAt"]
            cancelled = dmq.delay.get(gone["id"])
            assert cancelled is not None and cancelled.state is DelayState.CANCELLED
            assert published(stack, gone["id"]) == 0

            await stack.stop_brokers()  # no broker: the inner message is spooled, still 202 SCHEDULED
            spooled = await post_delayed(stack, "spooled", 500)
            assert stack.service.retry.stats().pending == 1
            await stack.start_brokers()
            await stack.drain()  # the replay delivered the inner message
            await until(lambda: published(stack, spooled["id"]) == 1)
            late = await stack.http.delete(f"/v1/messages/{kept['id']}")
            assert late.status_code == 409  # its due time has passed
        finally:
            await dmq.stop()


async def test_a_cancel_takes_back_a_message_still_spooled_here(
    make_stack: Callable[..., Any], tmp_path: Path
) -> None:
    """The message is spooled (no broker took it), and cancelled before it replays: it is taken back out
    of the retry store, so neither it nor a cancel reaches the inner topic, and the service never
    publishes it. (Before, the cancel went out beside it and the service had to receive the cancel
    first; spooled on its ladder behind the message, the cancel could arrive after the message was
    published. The service's handling of a cancel before its message is tests/app/dmq's tombstone tests.)"""
    held = {INNER: RetryPolicy((3600.0,), 5)}  # the spooled message's rung is an hour away
    async with make_stack(delay_mode="service", dmq_inner_topic=INNER, retry_types=held) as stack:
        await stack.stop_brokers()
        gone = await post_delayed(stack, "gone", 4000)
        assert stack.service.retry.stats().pending == 1  # spooled
        await stack.start_brokers()
        await stack.service.recovery.wait()  # a round the brokers' recovery started, if any
        if stack.service.retry.stats().pending == 1:  # not replayed by that round: taken back now
            r = await stack.http.delete(f"/v1/messages/{gone['id']}")
            assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
            assert stack.service.retry.stats().pending == 0
            assert [
                m
                for m in stack.stored(INNER)
                if gone["id"] in (m.uniq_key, m.properties.get("DMQ_CANCEL_ID"))
            ] == []
            r = await stack.http.get(f"/v1/messages/{gone['id']}")
            assert r.json()["status"] == "CANCELLED"
        else:  # the recovery round replayed it first: then the cancel goes out through the inner topic
            r = await stack.http.delete(f"/v1/messages/{gone['id']}")
            assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
        kept = await post_delayed(stack, "kept", 1000)  # due before gone: the service works on both

        options = DmqOptions(
            inner_topic=INNER, group="dmq_e2e_group2", http_addr="127.0.0.1:0", consume_batch_size=1
        )
        dmq = DmqService(dmq_settings(stack.cluster.namesrv_addr, tmp_path / "dmq"), options)
        await dmq.start()
        try:
            await until(lambda: published(stack, kept["id"]) == 1)
            await until(lambda: dmq.delay.now_ms() > gone["deliverAt"] + 500)
            await dmq.scheduler.wait_idle()
            assert published(stack, gone["id"]) == 0
        finally:
            await dmq.stop()


async def test_user_properties_named_like_the_inner_format_do_not_change_what_the_inner_message_is(
    make_stack: Callable[..., Any],
) -> None:
    """An app's delayed message with user properties DMQ_OP=CANCEL and DMQ_CANCEL_ID (or a sharding key,
    a timer delay) was answered 202 SCHEDULED, then read by the service as a cancel of another id: the
    message was lost. The format's properties are the sidecar's to set; an app's are not carried."""
    async with make_stack(delay_mode="service", dmq_inner_topic=INNER) as stack:
        await create_on_every_broker(stack, INNER)
        victim = await post_delayed(stack, "victim", 60_000)
        props = {
            "DMQ_OP": "CANCEL",
            "DMQ_CANCEL_ID": victim["id"],
            "DMQ_SHARDING_KEY": "elsewhere",
            "TIMER_DELAY_SEC": "1",
            "kept": "yes",
        }
        r = await stack.http.post(
            "/v1/messages", json={"topic": TOPIC, "body": "b", "delayMs": 60_000, "properties": props}
        )
        assert r.status_code == 202, r.text
        (wrapped,) = [m for m in stack.stored(INNER) if m.uniq_key == r.json()["id"]]
        item = inner.parse(wrapped, wrapped.store_timestamp_ms, inner.Rules(24 * 3600 * 1000))
        assert isinstance(item, DelayedMessage), item  # not a cancel of the victim
        assert item.id == r.json()["id"] and item.due_ms == r.json()["deliverAt"]
        assert item.sharding_key is None and item.properties.get("kept") == "yes"
