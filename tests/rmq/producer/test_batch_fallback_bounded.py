"""The messages of a chunk the broker refuses as a whole are sent again one by one with a bounded number in
flight (batch.FALLBACK_IN_FLIGHT). Before, every unkeyed message of the chunk was sent at once: one
send_batch of a few hundred messages refused for one message's sake became a few hundred concurrent
requests to the broker from one call."""

from __future__ import annotations

import asyncio

from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import RocketMQError, SendFailed
from rocksidecar.rmq.message_codec import decode_batch
from rocksidecar.rmq.producer.batch import FALLBACK_IN_FLIGHT
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import route, send_ok
from tests.rmq.producer.harness import Harness


class CountingBroker:
    """broker-a refuses any request holding a b"bad" message (MESSAGE_ILLEGAL, final) and stores the
    others; it counts the requests in flight, each held until every request that can be in flight at
    the same time has reached it (a yield to the loop, not a wait on time)."""

    def __init__(self, h: Harness, latency_s: float = 0.0) -> None:
        self.h = h
        self.latency_s = latency_s
        self.in_flight = 0
        self.peak = 0
        self.singles: list[bytes] = []  # the body of each one-message request, in the order they came
        self.started: list[tuple[float, float]] = []  # each request's (timer at its start, its timeout)
        self.answer = h.invoker.handler
        h.invoker.handler = self

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code not in (RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            return await self.answer(addr, cmd)
        self.started.append((self.h.timer.now, self.h.invoker.calls[-1][2]))
        records = decode_batch(cmd.body)
        if len(records) == 1:
            self.singles.append(records[0].body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0)  # every send ready to go reaches here before this one is answered
            self.h.timer.advance(self.latency_s)
            if any(r.body == b"bad" for r in records):
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "injected: one message refused")
            return send_ok(cmd)
        finally:
            self.in_flight -= 1


async def test_the_messages_of_a_refused_chunk_go_again_with_a_bounded_number_in_flight() -> None:
    h = Harness(routes={"T": route({"broker-a": 4})})
    broker = CountingBroker(h)
    producer = h.producer(max_batch_messages=1000)
    bodies = [b"bad" if i in (3, 150) else b"m%d" % i for i in range(300)]
    results = await producer.send_batch([Message("T", b) for b in bodies], validated=True)
    assert broker.peak <= FALLBACK_IN_FLIGHT, f"{broker.peak} sends in flight from one refused chunk"
    assert broker.peak > 1  # still concurrent: a refused chunk of 300 is not sent one at a time
    assert sorted(broker.singles) == sorted(bodies)  # each message once, alone
    for body, result in zip(bodies, results, strict=True):  # each its own outcome
        if body == b"bad":
            assert isinstance(result, RocketMQError) and result.final, result
        else:
            assert isinstance(result, SendResult), result


async def test_the_bounded_fallback_keeps_the_batchs_budget() -> None:
    """Waiting for a place costs budget like the sends themselves: those the batch's budget does not reach
    fail SendFailed (spooled, not lost), never final; none is sent past the budget."""
    h = Harness(routes={"T": route({"broker-a": 4})})
    broker = CountingBroker(h, latency_s=0.1)
    budget_s = 1.0
    producer = h.producer(send_timeout_s=budget_s)
    t0 = h.timer.now
    bodies = [b"bad"] + [b"m%d" % i for i in range(99)]
    results = await producer.send_batch([Message("T", b) for b in bodies], validated=True)
    assert broker.peak <= FALLBACK_IN_FLIGHT
    assert isinstance(results[0], RocketMQError) and results[0].final
    sent = [r for r in results[1:] if isinstance(r, SendResult)]
    late = [r for r in results[1:] if not isinstance(r, SendResult)]
    assert sent and late, results  # the budget ran out partway
    assert all(isinstance(r, SendFailed) and not r.final for r in late), late
    late_starts = [(at, timeout) for at, timeout in broker.started if at + timeout > t0 + budget_s + 1e-9]
    assert late_starts == [], f"sends (started at, timeout) running past the batch's budget: {late_starts}"


async def test_keyed_messages_of_a_refused_chunk_still_go_one_after_another_in_order() -> None:
    h = Harness(routes={"T": route({"broker-a": 4})})
    broker = CountingBroker(h)
    producer = h.producer()
    bodies = [b"a", b"bad", b"c", b"d", b"e", b"f"]
    results = await producer.send_batch([Message("T", b) for b in bodies], ["k"] * 6, validated=True)
    assert broker.singles == bodies
    assert broker.peak == 1
    assert [isinstance(r, SendResult) for r in results] == [True, False, True, True, True, True]
