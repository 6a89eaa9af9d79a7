"""StreamHub under races: an Ack as the timeout fires, a queue rebalanced away before any stream took its
messages (concurrent and orderly; traced, it is no error), deliveries abandoned while no stream is
attached."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from rocksidecar.app.api.grpc_subscribe import ack
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.request import RequestError
from rocksidecar.app.subscriptions.runner import Subscriptions
from rocksidecar.app.subscriptions.stream import Answer as StreamAnswer
from rocksidecar.app.subscriptions.stream import Delivery, StreamHub
from rocksidecar.app.tracing import msgtrace, spans
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.pool import RemotingClient
from tests.app.subscriptions.test_push import MQ, SPEC, message
from tests.app.subscriptions.test_stream import TraceRecords
from tests.app.tracing.conftest import exporter  # noqa: F401  (the fixture: spans on, kept in memory)
from tests.fakes import FakeClock
from tests.rmq.consumer.helpers import WAIT_S, Recorder, owned, settle, start

TIMEOUT_S = 5.0
GRPC = dataclasses.replace(SPEC, endpoint="grpc", timeout_s=TIMEOUT_S)


class FrozenLoopTime:
    """The running loop's clock, stopped: its timers fire only once ``advance`` moves it past them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, loop: asyncio.AbstractEventLoop) -> None:
        self.now = loop.time()
        self.timer_set = asyncio.Event()
        monkeypatch.setattr(loop, "time", lambda: self.now)
        call_later = loop.call_later

        def watched(delay: float, callback: Callable[..., Any], *args: Any, **kw: Any) -> asyncio.TimerHandle:
            handle = call_later(delay, callback, *args, **kw)
            if delay == TIMEOUT_S:  # the hub's wait for the app's answer
                self.timer_set.set()
            return handle

        monkeypatch.setattr(loop, "call_later", watched)

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def test_an_ack_accepted_as_the_timeout_fires_is_not_then_counted_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The timeout's timer and an Ack land in the same turn of the loop, the timer first: Ack finds the
    delivery still open, sets its answer and the RPC answers OK; then wait_for wakes, finds the shield's
    outer future not yet done (its copy of the answer is one callback behind) and raises TimeoutError.
    The hub counts an error and hands RECONSUME_LATER to the consumer: the app was told its OK was
    taken, and gets the message again."""
    loop = asyncio.get_running_loop()
    clock = FrozenLoopTime(monkeypatch, loop)
    seen: list[str] = []
    hub = StreamHub(GRPC, on_delivery=lambda _name, outcome, _took, _msg: seen.append(outcome))
    hubs = {"orders": hub}
    delivered = asyncio.create_task(hub.deliver(message(), MQ))
    d = await hub.next()  # a stream takes it
    await clock.timer_set.wait()  # the hub now waits up to TIMEOUT_S for the answer
    acked: list[bool] = []

    def app_acks() -> None:  # the Ack RPC, run in the same turn, just after the timeout's timer
        try:
            ack(hubs, pb.AckRequest(delivery_id=d.delivery_id, outcome=pb.ACK_OK))
        except RequestError:
            acked.append(False)
        else:
            acked.append(True)

    loop.call_at(clock.now + TIMEOUT_S + 0.001, app_acks)
    clock.advance(TIMEOUT_S + 1)
    ok = await delivered
    assert acked == [True], "the Ack was taken: the RPC answered OK"
    assert ok is True, "the Ack answered OK, yet the hub counted the delivery failed (redelivered)"
    assert seen == ["ok"], seen


class Counted(asyncio.Queue[Delivery]):
    """The hub's queue, telling how many deliveries were ever put in it."""

    def __init__(self) -> None:
        super().__init__()
        self.puts = 0
        self.changed = asyncio.Event()

    async def put(self, item: Delivery) -> None:
        await super().put(item)
        self.puts += 1
        self.changed.set()

    async def reach(self, n: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while self.puts < n:
                self.changed.clear()
                await self.changed.wait()


CLOSE_S = 0.5  # what close() waits for a delivery still unanswered when a test ends


def answer_all(hub: StreamHub) -> None:
    """End of a test: answer what the hub's streams hold, so that closing need not wait for it."""
    for d in list(hub._open.values()):
        hub.ack(d.delivery_id, StreamAnswer.OK)


async def put_one(cluster: DevCluster, mq: MessageQueue, body: bytes) -> None:
    client = RemotingClient()
    try:
        await BrokerApi(client).send(
            cluster.brokers[mq.broker_name].addr, mq, Message(mq.topic, body), new_uniq_id(), 3.0
        )
    finally:
        await client.close()


async def test_a_stream_is_not_handed_messages_of_a_queue_rebalanced_away_before_any_stream_took_them(
    cluster: DevCluster,
) -> None:
    """No app attached: the hub holds what member A pulled (the listener waits for a stream without a
    bound). Member B joins and takes half of A's queues from their committed offsets, so it delivers
    those messages to its app. When A's app then attaches, the hub hands it every one of them too:
    none had reached an app before the queue was dropped, yet each is now processed twice (and the
    consumer ignores the app's answer, the queue being dropped). Java's ConsumeRequest checks
    ``processQueue.isDropped()`` before giving a message to the listener; the hub's wait for a stream
    is that step here, and it never checks."""
    topic, group = "HubDropT", "GHubDrop"
    spec = dataclasses.replace(GRPC, topic=topic, group=group, consume_from="first")
    subs = Subscriptions(
        [spec], cluster.namesrv_addr, instance_name="a", close_timeout_s=CLOSE_S
    )  # the sidecar's wiring
    hub = subs.hubs[spec.name]
    queue = hub._queue = Counted()
    a = subs.consumers[spec.name]
    made: list[PushConsumer] = []
    try:
        for broker in cluster.brokers.values():
            broker.topics.ensure(topic, 4)
        await subs.start()
        await settle(a, lambda: len(owned(a, topic)) == 8)
        queues = sorted(owned(a, topic), key=lambda mq: (mq.broker_name, mq.queue_id))
        for mq in queues:
            await put_one(cluster, mq, f"{mq.broker_name}/{mq.queue_id}".encode())
        await queue.reach(8)  # all eight wait in A's hub: no stream yet
        config = ConsumerConfig(
            group, instance_name="b", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET
        )
        b_got = Recorder()
        b = await start(made, cluster, config, b_got, topic=topic)
        await settle(a, lambda: len(owned(a, topic)) == 4)
        await b.rebalance()
        gone = set(queues) - owned(a, topic)
        assert gone and gone <= owned(b, topic)
        await b_got.until(lambda got: len(got) >= len(gone))  # B's app has them
        marker_mq = min(owned(a, topic), key=lambda mq: (mq.broker_name, mq.queue_id))
        await put_one(cluster, marker_mq, b"marker")
        await queue.reach(9)
        stale: list[str] = []
        while True:  # A's app attaches now and works through what its stream is given
            d = await hub.next()
            hub.ack(d.delivery_id, StreamAnswer.OK)
            if d.msg.body == b"marker":
                break
            if d.mq in gone:
                stale.append(d.msg.body.decode())
        assert stale == [], f"handed to A's app after B took their queues (and delivered them): {stale}"
    finally:
        for c in made:
            await c.close()
        answer_all(hub)
        await subs.close()


async def test_an_orderly_queue_rebalanced_away_does_not_reach_the_old_members_app_after_the_new_ones() -> (
    None
):
    """The orderly case of the same: member A's hub holds the first message of a queue (no stream yet).
    B joins; A drops the queue but, its listener busy, keeps the broker's lock, which lapses after 60 s;
    B then locks the queue and its app gets messages 0 and 1. When A's app attaches, A's hub hands it
    message 0: the queue's messages reach the apps as 0, 1, 0."""
    clock = FakeClock()
    async with DevCluster(brokers=1, queues=2, clock=clock) as cluster:
        topic, group = "HubOrderT", "GHubOrder"
        cluster.brokers["broker-a"].topics.ensure(topic, 2)
        spec = dataclasses.replace(GRPC, topic=topic, group=group, consume_from="first", mode="orderly")
        subs = Subscriptions([spec], cluster.namesrv_addr, instance_name="a", close_timeout_s=CLOSE_S)
        hub = subs.hubs[spec.name]
        queue = hub._queue = Counted()
        a = subs.consumers[spec.name]
        made: list[PushConsumer] = []
        try:
            await subs.start()
            await settle(a, lambda: len(owned(a, topic)) == 2)
            queues = sorted(owned(a, topic), key=lambda mq: mq.queue_id)
            for mq in queues:
                for i in range(2):
                    await put_one(cluster, mq, f"{mq.queue_id}/{i}".encode())
            await queue.reach(2)  # the first of each queue waits in A's hub (orderly: one at a time)
            b_got = Recorder()
            config = ConsumerConfig(
                group,
                instance_name="b",
                client_ip="127.0.0.1",
                orderly=True,
                consume_from=ConsumeFrom.FIRST_OFFSET,
                suspend_orderly_s=0.01,
            )
            b = await start(made, cluster, config, b_got, topic=topic)
            await settle(a, lambda: len(owned(a, topic)) == 1)
            (gone,) = set(queues) - owned(a, topic)
            clock.advance(61)  # A's lock on it lapses (A's listener was busy: it did not unlock)
            await b.rebalance()
            assert gone in owned(b, topic)
            await b_got.until(lambda got: len(got) >= 2)
            assert [m.body for m in b_got.got] == [
                f"{gone.queue_id}/0".encode(),
                f"{gone.queue_id}/1".encode(),
            ]
            d = await hub.next()  # A's app attaches
            while d.mq != gone and d.msg.queue_offset == 0:  # A's own queue's first message: answer it
                hub.ack(d.delivery_id, StreamAnswer.OK)
                d = await hub.next()
            assert d.mq != gone, (
                f"A's app got {d.msg.body!r} of {gone} after B's app got messages 0 and 1 of that queue"
            )
        finally:
            for c in made:
                await c.close()
            answer_all(hub)
            await subs.close()


async def test_a_delivery_abandoned_while_no_stream_is_attached_is_not_kept_by_the_hub() -> None:
    """No app attached: the listener call waits in the hub. The consumer ends such a call after its
    consume timeout (the concurrent service's sweep cancels it after HOLD_S, 24 h; orderly's
    call_listener likewise) and the broker delivers the message again later. The abandoned delivery
    (message, body and all) stays in the hub's queue until some stream takes it from there; with no app
    for days, each day adds one per listener call that was waiting."""
    hub = StreamHub(GRPC)
    queue = hub._queue = Counted()
    n = 5
    waiting = [
        asyncio.create_task(hub.deliver(dataclasses.replace(message(), queue_offset=i), MQ)) for i in range(n)
    ]
    await queue.reach(n)
    refs = [weakref.ref(d) for d in list(queue._queue)]  # type: ignore[attr-defined]
    for task in waiting:  # what the consume timeout does to each listener call
        task.cancel()
    await asyncio.wait(waiting)
    # What a cancelled call raised keeps its frame, the delivery included (the CancelledErrors gather
    # returned, held by the loop's current callback until this step ends; a cancelled task not yet
    # asked for its result). The consumer lets them go; so does this, to see only what the hub keeps.
    del waiting, task
    gc.collect()
    kept = sum(ref() is not None for ref in refs)
    assert kept == 0, f"{kept} of {n} abandoned deliveries (bodies included) still held by the hub"


async def test_a_delivery_of_a_queue_dropped_before_any_stream_took_it_is_traced_as_no_error(
    exporter: InMemorySpanExporter,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A message waiting in the hub whose queue is rebalanced away is handed to no stream (QueueDropped):
    nothing failed, nobody was asked. Found by a review (session 29): traced, its process and deliver
    spans ended with status ERROR and a recorded QueueDropped exception, so every rebalance showed as a
    burst of consume errors (an app answering FAILED, a real failure, gets only ``error.type``). They end
    marked ``rocksidecar.dropped`` instead, and no message trace record is written (the app never saw
    it; its queue's new owner delivers it and records that)."""
    records = TraceRecords()
    monkeypatch.setattr(msgtrace, "DISPATCHER", records)
    hub = StreamHub(dataclasses.replace(SPEC, endpoint="grpc"))
    pq = ProcessQueue(0)
    hub.process_queue = lambda _mq: pq
    queue = hub._queue = Counted()
    consumed = asyncio.create_task(hub([message()], MQ))
    await queue.reach(1)  # waiting in the hub: no stream attached yet
    pq.drop()  # rebalanced away while no stream was attached
    taker = asyncio.create_task(hub.next())  # a stream attaches: it must not get the message
    try:
        assert await consumed is ConsumeStatus.RECONSUME_LATER  # ignored by the consumer: dropped
    finally:
        taker.cancel()
        await asyncio.gather(taker, return_exceptions=True)
    finished = exporter.get_finished_spans()
    assert sorted(s.name for s in finished) == ["deliver T", "process T"]
    for span in finished:
        assert span.status.status_code is StatusCode.UNSET, (span.name, span.status.description)
        assert span.events == () or not any(e.name == "exception" for e in span.events), span.name
        assert span.attributes and span.attributes[spans.DROPPED] is True
        assert "error.type" not in span.attributes
    assert records.subs == []  # msgtrace.consumed was not called for it
