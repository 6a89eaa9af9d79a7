"""Coalesced single sends in the running sidecar (issue 18, coalesce_sends): concurrent requests share
broker batches, yet each answer is its own, and the promise holds when the brokers are down."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from rocksidecar.app.request import Prepared
from rocksidecar.app.sidecar import Status
from rocksidecar.rmq import Message
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer.coalesce import CoalescingSender
from tests.app.conftest import Stack


def prepared(topic: str, n: int) -> list[Prepared]:
    return [Prepared(Message(topic, f"m{i}".encode(), id=new_uniq_id()), None, topic, None) for i in range(n)]


def counter(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


async def test_concurrent_posts_each_get_their_own_answer(stack: Stack) -> None:
    bodies = [f"order {i}" for i in range(24)]
    answers = await asyncio.gather(
        *(stack.http.post("/v1/messages", json={"topic": "Many", "body": b}) for b in bodies)
    )
    assert [a.status_code for a in answers] == [200] * 24
    docs = [a.json() for a in answers]
    stored = {m.uniq_key: m for m in stack.stored("Many")}
    assert len(stored) == 24
    for body, doc in zip(bodies, docs, strict=True):
        m = stored[doc["id"]]
        assert m.body == body.encode() and (m.queue_id, m.queue_offset) == (
            doc["queueId"],
            doc["queueOffset"],
        )
    text = (await stack.http.get("/metrics")).text
    sender = stack.service.sender
    assert isinstance(sender, CoalescingSender)
    assert counter(text, "rocksidecar_coalesced_messages_total") == sender.coalesced
    assert counter(text, "rocksidecar_coalesced_batches_total") == sender.batches


async def test_sends_asked_for_while_one_is_in_flight_share_a_batch(stack: Stack) -> None:
    items = prepared("Turn", 16)
    outcomes = await asyncio.gather(*(stack.service.sidecar.send(p) for p in items))
    sender = stack.service.sender
    assert isinstance(sender, CoalescingSender) and (sender.batches, sender.coalesced) == (1, 15)
    assert all(o.status is Status.SENT for o in outcomes)
    assert sorted(m.uniq_key or "" for m in stack.stored("Turn")) == sorted(p.message.id for p in items)


async def test_a_coalesced_batch_the_brokers_cannot_take_is_spooled_message_by_message(stack: Stack) -> None:
    await stack.service.sidecar.send(prepared("Down", 1)[0])  # the route is known
    await stack.stop_brokers()
    items = prepared("Down", 12)
    outcomes = await asyncio.gather(*(stack.service.sidecar.send(p) for p in items))
    assert all(o.status is Status.SPOOLED for o in outcomes)
    assert getattr(stack.service.sender, "batches", 0) == 1  # the twelve went as one batch, and failed
    assert stack.service.retry.stats().pending == 12
    await stack.start_brokers()
    await stack.drain()
    assert {p.message.id for p in items} <= {m.uniq_key for m in stack.stored("Down")}


async def test_coalescing_off_sends_each_message_alone(make_stack: Callable[..., Any]) -> None:
    async with make_stack(coalesce_sends=False) as stack:
        assert stack.service.sender is stack.service.producer
        outcomes = await asyncio.gather(*(stack.service.sidecar.send(p) for p in prepared("Alone", 8)))
        assert all(o.status is Status.SENT for o in outcomes)
        assert "rocksidecar_coalesced_messages_total" not in (await stack.http.get("/metrics")).text
