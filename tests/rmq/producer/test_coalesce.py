"""CoalescingSender (issue 18): single sends asked for while others are in flight go out together as one
batch, and each caller still gets exactly what a single send would have given it: its own result, or
its own error."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import (
    Message,
    MessageQueue,
    RemotingClient,
    RocketMQError,
    SendFailed,
    SendResult,
    SendStatus,
)
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.errors import for_code
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer.coalesce import CoalescingSender
from tests.fakes import FakeClock
from tests.rmq.producer.test_producer_devbroker import TOPIC, make_producer


class Recorder:
    """A Sender that records its calls, each of which takes a loop turn (or waits for ``hold``) as a
    network round trip does; a message whose body is in ``refuse`` fails with ``code``. In a batch, a
    final code fails only that message (the Sender's send_batch contract, which the Producer keeps by
    sending a refused batch again one by one); a retriable one (the broker busy) fails the whole batch,
    as one refused request does."""

    def __init__(
        self,
        refuse: frozenset[bytes] = frozenset(),
        code: int = ResponseCode.MESSAGE_ILLEGAL,
        hold: asyncio.Event | None = None,
    ) -> None:
        self.refuse = refuse
        self.code = code
        self.hold = hold
        self.singles: list[Message] = []
        self.batches: list[list[Message]] = []
        self.keys: list[list[str | None]] = []
        self.calls: asyncio.Queue[list[Message]] = asyncio.Queue()  # what went on the wire, in order
        self.offset = 0

    def _result(self, msg: Message) -> SendResult:
        self.offset += 1
        return SendResult(SendStatus.SEND_OK, msg.id or "", "", MessageQueue(msg.topic, "b", 0), self.offset)

    async def _wire(self, msgs: list[Message]) -> None:
        self.calls.put_nowait(msgs)
        await asyncio.sleep(0)  # the round trip: the caller is suspended, as on a real connection
        if self.hold is not None:
            await self.hold.wait()

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        self.singles.append(msg)
        await self._wire([msg])
        if msg.body in self.refuse:
            raise for_code(self.code, "refused")
        return self._result(msg)

    async def send_batch(
        self, messages: Sequence[Message], sharding_keys: Sequence[str | None] | None = None, **_: object
    ) -> list[SendResult | RocketMQError]:
        self.batches.append(list(messages))
        self.keys.append(list(sharding_keys or [None] * len(messages)))
        await self._wire(list(messages))
        refused = SendFailed("refused", [], for_code(self.code, "refused"))
        if not refused.final and any(m.body in self.refuse for m in messages):
            return [refused for _ in messages]
        return [refused if m.body in self.refuse else self._result(m) for m in messages]


def messages(n: int, size: int = 8) -> list[Message]:
    return [Message("T", f"m{i}".encode().ljust(size, b"."), id=new_uniq_id()) for i in range(n)]


async def test_a_send_with_nothing_in_flight_goes_at_once_and_those_meanwhile_share_a_batch() -> None:
    inner = Recorder()
    sender = CoalescingSender(inner)
    msgs = messages(20)
    keys = [None if i % 2 else f"k{i}" for i in range(20)]
    results = await asyncio.gather(
        *(sender.send(m, sharding_key=k, validated=True) for m, k in zip(msgs, keys, strict=True))
    )
    assert inner.singles == msgs[:1] and inner.batches == [msgs[1:]] and inner.keys == [keys[1:]]
    assert [r.msg_id for r in results] == [m.id for m in msgs]
    assert sorted(r.queue_offset for r in results) == list(range(1, 21))
    assert (sender.batches, sender.coalesced) == (1, 19)


async def test_a_lone_send_goes_as_a_single_send() -> None:
    inner = Recorder()
    sender = CoalescingSender(inner)
    (msg,) = messages(1)
    result = await sender.send(msg, validated=True)
    assert inner.singles == [msg] and inner.batches == [] and result.msg_id == msg.id
    assert (sender.batches, sender.coalesced) == (0, 0)


async def test_sends_of_later_turns_go_in_later_batches() -> None:
    hold = asyncio.Event()
    inner = Recorder(hold=hold)
    sender = CoalescingSender(inner)
    first, a, b = messages(1), messages(2), messages(3)
    tasks = [asyncio.create_task(sender.send(m, validated=True)) for m in first + a]
    assert await inner.calls.get() == first  # nothing was in flight: at once
    assert await inner.calls.get() == a  # came while it was: together, a turn later
    tasks += [asyncio.create_task(sender.send(m, validated=True)) for m in b]
    assert await inner.calls.get() == b  # a later turn, another batch
    hold.set()
    results = await asyncio.gather(*tasks)
    assert [r.msg_id for r in results] == [m.id for m in first + a + b]
    assert inner.batches == [a, b]


async def test_a_final_error_in_a_batch_reaches_its_caller_alone_without_a_second_send() -> None:
    """Before session 14 the coalescer sent a message its batch got a final error for again alone: one
    more refused round trip, since the Producer's batch sender had already isolated it."""
    msgs = messages(5)
    inner = Recorder(refuse=frozenset({msgs[2].body}))
    sender = CoalescingSender(inner)
    outcomes = await asyncio.gather(*(sender.send(m, validated=True) for m in msgs), return_exceptions=True)
    assert inner.batches == [msgs[1:]] and inner.singles == msgs[:1]  # the first at once, the rest one batch
    assert [isinstance(o, SendResult) for o in outcomes] == [True, True, False, True, True]
    failed = outcomes[2]
    assert isinstance(failed, SendFailed) and failed.final and failed.code == ResponseCode.MESSAGE_ILLEGAL


async def test_a_batch_that_may_succeed_later_fails_its_callers_without_a_second_try() -> None:
    msgs = messages(4)
    inner = Recorder(refuse=frozenset({msgs[1].body}), code=ResponseCode.SYSTEM_BUSY)
    sender = CoalescingSender(inner)
    outcomes = await asyncio.gather(*(sender.send(m, validated=True) for m in msgs), return_exceptions=True)
    assert inner.singles == msgs[:1]  # retriable: the caller's own failure handling (the retry store)
    assert isinstance(outcomes[0], SendResult)
    assert all(isinstance(o, SendFailed) and o.retriable for o in outcomes[1:])


async def test_bodies_a_single_send_compresses_and_unvalidated_messages_are_not_coalesced() -> None:
    hold = asyncio.Event()
    inner = Recorder(hold=hold)
    sender = CoalescingSender(inner, compress_over_bytes=64)
    first, small, big = messages(1)[0], messages(1)[0], messages(1, size=65)[0]
    unchecked = messages(1)[0]
    tasks = [asyncio.create_task(sender.send(first, validated=True))]
    await inner.calls.get()  # in flight: what comes now would be coalesced, if it may be
    tasks += [
        asyncio.create_task(sender.send(m, validated=v))
        for m, v in ((small, True), (big, True), (unchecked, False))
    ]
    assert [await inner.calls.get() for _ in range(3)] == [[big], [unchecked], [small]]
    hold.set()
    await asyncio.gather(*tasks)
    assert inner.batches == [] and inner.singles == [first, big, unchecked, small]


async def test_a_cancelled_caller_leaves_the_others_their_results() -> None:
    inner = Recorder()
    sender = CoalescingSender(inner)
    msgs = messages(3)
    tasks = [asyncio.create_task(sender.send(m, validated=True)) for m in msgs]
    assert await inner.calls.get() == msgs[:1]  # the other two are queued by now
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert [r.msg_id for r in (done[0], done[2])] == [msgs[0].id, msgs[2].id]  # type: ignore[union-attr]
    assert inner.batches == [msgs[1:]]  # a send asked for goes, as a started single send would


async def test_an_unexpected_error_reaches_every_caller() -> None:
    class Broken(Recorder):
        async def send(self, *a: object, **k: object) -> SendResult:
            await asyncio.sleep(0)
            raise OSError("bug below")

        async def send_batch(self, *a: object, **k: object) -> list[SendResult | RocketMQError]:
            raise OSError("bug below")

    sender = CoalescingSender(Broken())
    outcomes = await asyncio.gather(
        *(sender.send(m, validated=True) for m in messages(3)), return_exceptions=True
    )
    assert all(isinstance(o, OSError) for o in outcomes) and sender.batches == 1


async def test_devbroker_stores_each_coalesced_message_whole_at_the_offset_its_caller_was_given(
    cluster: DevCluster, client: RemotingClient
) -> None:
    producer = await make_producer(cluster, client, FakeClock())
    sender = CoalescingSender(producer)
    msgs = [
        Message(
            TOPIC,
            f"body {i}".encode(),
            tags=f"t{i}",
            keys=(f"k{i}",),
            properties={"n": str(i)},
            id=new_uniq_id(),
        )
        for i in range(40)
    ]
    keys = [None] * 30 + ["order-7"] * 10
    results = await asyncio.gather(
        *(sender.send(m, sharding_key=k, validated=True) for m, k in zip(msgs, keys, strict=True))
    )
    assert (sender.batches, sender.coalesced) == (1, 39)  # the first went at once
    for msg, result in zip(msgs, results, strict=True):
        assert result.status is SendStatus.SEND_OK and result.msg_id == msg.id
        broker = cluster.brokers[result.queue.broker_name]
        stored = {m.queue_offset: m for m in broker.messages(TOPIC, result.queue.queue_id)}
        got = stored[result.queue_offset]
        assert (got.body, got.tags, got.keys, got.uniq_key, got.properties["n"]) == (
            msg.body, msg.tags, msg.keys, msg.id, msg.properties["n"]
        )  # fmt: skip
    keyed = results[30:]
    assert len({r.queue for r in keyed}) == 1  # one key, one queue, in the callers' order
    assert [r.queue_offset for r in keyed] == list(range(keyed[0].queue_offset, keyed[0].queue_offset + 10))


async def test_devbroker_refusing_the_batch_fails_only_the_bad_message(
    cluster: DevCluster, client: RemotingClient
) -> None:
    producer = await make_producer(cluster, client, FakeClock())
    sender = CoalescingSender(producer)
    # Within the broker's 32 767 bytes with the ids the client adds, but not with the CLUSTER property the
    # broker appends: MESSAGE_ILLEGAL, alone or in a batch (Message.validate refuses it now; sent as a
    # caller that validated by an older rule would)
    bad = Message(TOPIC, b"too much", properties={"p": "x" * 32_710}, id=new_uniq_id())
    ok = [Message(TOPIC, f"fine {i}".encode(), id=new_uniq_id()) for i in range(4)]
    outcomes = await asyncio.gather(
        *(sender.send(m, validated=True) for m in [*ok, bad]), return_exceptions=True
    )
    assert sender.batches == 1
    refused = outcomes[-1]
    assert isinstance(refused, RocketMQError) and refused.final, refused
    assert all(isinstance(o, SendResult) and o.status is SendStatus.SEND_OK for o in outcomes[:-1])
    stored = [m.body for broker in cluster.brokers.values() for m in broker.messages(TOPIC)]
    assert sorted(stored) == sorted(m.body for m in ok)  # each once, the bad one never
