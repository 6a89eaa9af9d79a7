"""A batch has the one send budget ProducerConfig.send_timeout_s gives a send ("one budget for a send and
all its retries"), from its route lookup to the last message of a chunk the broker refused as a whole and
sent again one by one (review of session 29: each of those singles had a fresh budget, a batch of n took
up to n + 1 of them, and a batch waited for its route with no bound of its own)."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.rmq import Message
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import RocketMQError, SendFailed
from rocksidecar.rmq.message_codec import decode_batch
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import route, send_ok
from tests.rmq.producer.harness import Harness


def _refusing(h: Harness, latency_s: float, started: list[tuple[float, float, bytes]]) -> None:
    """broker-a answers each request ``latency_s`` later (on h.timer), refusing any batch holding b"bad";
    ``started`` gets each request's (timer, timeout, first body)."""

    def reply(cmd: RemotingCommand) -> RemotingCommand:
        records = decode_batch(cmd.body)
        started.append((h.timer.now, h.invoker.calls[-1][2], records[0].body))
        h.timer.advance(latency_s)
        if any(r.body == b"bad" for r in records):
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "injected: one message refused")
        return send_ok(cmd)

    h.behaviour["broker-a"] = reply


async def test_a_batch_refused_for_one_message_sends_its_neighbours_within_the_send_budget() -> None:
    h = Harness(routes={"T": route({"broker-a": 4})})
    latency_s, budget_s = 0.3, 1.0
    started: list[tuple[float, float, bytes]] = []
    _refusing(h, latency_s, started)
    producer = h.producer(send_timeout_s=budget_s)
    t0 = h.timer.now
    batch = [Message("T", b"a"), Message("T", b"bad"), Message("T", b"c"), Message("T", b"d")]
    results = await producer.send_batch(batch, validated=True)
    assert isinstance(results[1], RocketMQError) and results[1].final
    # No attempt may be allowed to run past the end of the budget the batch started with.
    late = [
        (round(at - t0, 3), round(timeout, 3))
        for at, timeout, _ in started
        if at + timeout > t0 + budget_s + 1e-9
    ]
    assert late == [], f"attempts (started at, timeout) running past the {budget_s} s budget: {late}"


async def test_keyed_neighbours_of_a_refused_message_go_in_order_and_those_past_the_budget_fail() -> None:
    """Keyed messages (one queue) are sent again one after another, in their order; those the budget
    does not reach fail SendFailed, not final (the sidecar spools them), none final but the bad one."""
    h = Harness(routes={"T": route({"broker-a": 4})})
    started: list[tuple[float, float, bytes]] = []
    _refusing(h, 0.3, started)
    producer = h.producer(send_timeout_s=1.0)
    bodies = [b"a", b"bad", b"c", b"d", b"e"]
    results = await producer.send_batch([Message("T", b) for b in bodies], ["k"] * 5, validated=True)
    sent_alone = [body for _, _, body in started[1:]]
    assert sent_alone == bodies[: len(sent_alone)]  # in order, as far as the budget went
    assert isinstance(results[1], RocketMQError) and results[1].final
    assert all(isinstance(r, SendFailed) and not r.final for r in results[len(sent_alone) :]), results


async def test_a_batch_waits_for_its_route_no_longer_than_the_send_budget() -> None:
    """Here the name server never answers: a send gives up within its budget, and so does a batch (it
    awaited routes.get with no bound: the name-server client's own timeouts, 3 s an address, twice for a
    new topic, past ROCKSIDECAR_SEND_TIMEOUT_MS)."""
    h = Harness()
    silent = asyncio.Event()
    answer = h.invoker.handler

    async def handler(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            await silent.wait()  # a hung name server (never set)
        return await answer(addr, cmd)

    h.invoker.handler = handler
    budget_s = 0.05
    producer = h.producer(send_timeout_s=budget_s)
    with pytest.raises(SendFailed):  # the single send: within its budget (real loop time)
        await asyncio.wait_for(producer.send(Message("T", b"one"), validated=True), 40 * budget_s)
    try:
        results = await asyncio.wait_for(
            producer.send_batch([Message("T", b"a"), Message("T", b"b")], validated=True), 40 * budget_s
        )
    except TimeoutError:
        pytest.fail(f"the batch was still waiting for its route {40 * budget_s} s into a {budget_s} s budget")
    assert all(isinstance(r, SendFailed) for r in results), results
