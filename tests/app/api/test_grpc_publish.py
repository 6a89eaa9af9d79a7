"""The Publish stream sends its messages in batches, one batch in flight per stream: the stream's order
reaches the broker, every message is answered once by its sequence, the reader stops at the window,
and a failing batch answers each of its messages with the error. A sharding key's messages read in one
batch reach its lane (retry.lanes) in the stream's order, whatever their ack modes, tracing on or off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rocksidecar.app.api.grpc_publish import BatchCombiner, PublishStreams, StreamPublisher
from rocksidecar.app.api.operations import BatchItem, EdgeDeps, Operations
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.metrics import Metrics
from rocksidecar.app.request import GRPC_FIELDS, Limits, MessageFields, MessageSpec
from rocksidecar.app.sidecar import Ack, Outcome, Sidecar, Status
from rocksidecar.app.store_delivery import StoreDelivery
from rocksidecar.app.tracing import spans
from rocksidecar.delay import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay import DelayStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.rmq import Message, MessageQueue, RocketMQError, SendResult, SendStatus
from rocksidecar.rmq.errors import RequestTimeout
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.app.conftest import Stack
from tests.fakes import FakeWallClock


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[pb_grpc.SidecarStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        yield pb_grpc.SidecarStub(channel)


async def test_a_stream_goes_out_in_batches_in_its_order(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    for broker in stack.cluster.brokers.values():
        broker.faults.latency_s = 0.05  # messages arrive while a batch is on its way
    sidecar = stack.service.sidecar
    batches: list[int] = []
    send_batch = sidecar.send_batch

    async def counted(items: Sequence[Any], ack: Ack = Ack.BROKER) -> list[Outcome | Exception]:
        batches.append(len(items))
        return await send_batch(items, ack)

    sidecar.send_batch = counted  # type: ignore[method-assign]

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(300):
            yield pb.PublishRequest(
                sequence=i, message=pb.Message(topic="GO", body=f"m{i}", sharding_key="k")
            )

    acks = [ack async for ack in stub.Publish(requests())]
    assert sorted(a.sequence for a in acks) == list(range(300))
    assert all(a.result.status == pb.SENT for a in acks)
    stored = sorted(stack.stored("GO"), key=lambda m: m.queue_offset)
    assert [m.body for m in stored] == [f"m{i}".encode() for i in range(300)]  # one queue, the stream's order
    assert sum(batches) == 300 and len(batches) < 300 and max(batches) > 1


async def test_mixed_ack_modes_are_each_answered(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(40):
            ack = pb.ACK_SPOOL if i % 3 == 0 else pb.ACK_BROKER
            yield pb.PublishRequest(sequence=i, ack=ack, message=pb.Message(topic="GM", body=f"m{i}"))

    acks = {a.sequence: a for a in [ack async for ack in stub.Publish(requests())]}
    assert sorted(acks) == list(range(40))
    assert [i for i, a in sorted(acks.items()) if a.result.status == pb.SPOOLED] == list(range(0, 40, 3))
    assert all(a.result.status == pb.SENT for i, a in acks.items() if i % 3)
    await stack.drain()
    assert {m.uniq_key for m in stack.stored("GM")} == {a.result.id for a in acks.values()}


class _HeldOps:
    """Operations' send_each held until released; records what each batch had."""

    batch_limit = 1000

    def __init__(self, fail: Exception | None = None) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()  # a batch is on its way
        self.batches: list[int] = []
        self.counted: list[tuple[str, int]] = []
        self._fail = fail

    async def send_each(self, specs: Sequence[MessageFields], ack: Ack, trace: Any) -> list[BatchItem]:
        self.batches.append(len(specs))
        self.started.set()
        await self.release.wait()
        if self._fail is not None:
            raise self._fail
        return [Outcome(f"id-{s.body}", Status.SENT) for s in specs]

    def count(self, label: str, n: int = 1) -> None:
        self.counted.append((label, n))


async def test_the_reader_stops_at_the_window() -> None:
    ops = _HeldOps()
    read: list[int] = []
    window_full = asyncio.Event()

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(20):
            read.append(i)
            if len(read) == 5:
                window_full.set()
            yield pb.PublishRequest(sequence=i, message=pb.Message(topic="T", body=str(i)))

    publisher = StreamPublisher(cast(Operations, ops), None, window=4)
    answers = publisher.run(requests())
    first = asyncio.ensure_future(anext(answers))
    await asyncio.wait_for(ops.started.wait(), 5)
    # 4 read and unanswered: the reader waits for room, and the fifth is not asked for
    assert ops.batches == [4] and len(read) == 4 and not window_full.is_set()
    ops.release.set()
    got = [(await first).sequence] + [a.sequence async for a in answers]
    assert got == list(range(20))
    assert sum(ops.batches) == 20 and max(ops.batches) <= 4


async def test_a_failing_batch_answers_each_message_with_the_error() -> None:
    ops = _HeldOps(fail=RuntimeError("store down"))
    ops.release.set()

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(3):
            yield pb.PublishRequest(sequence=i, message=pb.Message(topic="T", body=str(i)))

    acks = [a async for a in StreamPublisher(cast(Operations, ops), None, window=8).run(requests())]
    assert [a.sequence for a in acks] == [0, 1, 2]
    assert all(a.error.http_status == 500 for a in acks)
    assert sum(n for label, n in ops.counted if label == "FAILED") == 3


async def test_traced_each_message_has_its_receive_span(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    spans.configure(provider)
    try:

        async def requests() -> AsyncIterator[pb.PublishRequest]:
            for i in range(3):
                yield pb.PublishRequest(sequence=i, message=pb.Message(topic="GT", body=f"m{i}"))

        acks = [a async for a in stub.Publish(requests())]
    finally:
        spans.configure(None)
    assert sorted(a.sequence for a in acks) == [0, 1, 2] and all(a.result.status == pb.SENT for a in acks)
    # as Send makes for one message: a receive span each, not one for a batch
    assert [s.name for s in memory.get_finished_spans()].count("receive GT") == 3


async def test_batches_handed_in_while_one_is_in_flight_go_out_together() -> None:
    ops = _HeldOps()
    combiner = BatchCombiner(cast(Operations, ops))

    def specs(*bodies: str) -> list[MessageFields]:
        return [MessageSpec(topic="T", body=b) for b in bodies]

    first = asyncio.ensure_future(combiner.send(specs("a"), Ack.BROKER, None))
    await asyncio.wait_for(ops.started.wait(), 5)
    second = asyncio.ensure_future(combiner.send(specs("b", "c"), Ack.BROKER, None))
    third = asyncio.ensure_future(combiner.send(specs("d"), Ack.BROKER, None))
    spooled = asyncio.ensure_future(combiner.send(specs("e"), Ack.SPOOL, None))  # another mode: its own
    ops.release.set()
    answers = await asyncio.gather(first, second, third, spooled)
    assert [[o.id for o in a if isinstance(o, Outcome)] for a in answers] == [
        ["id-a"],
        ["id-b", "id-c"],
        ["id-d"],
        ["id-e"],
    ]
    assert sorted(ops.batches) == [1, 1, 3]  # a; e alone (its mode); b, c and d as one batch


async def test_a_sender_that_breaks_ends_the_stream_with_its_error() -> None:
    class _Short(_HeldOps):
        async def send_each(self, specs: Sequence[MessageFields], ack: Ack, trace: Any) -> list[BatchItem]:
            return []  # fewer results than messages: answering them raises

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(3):
            yield pb.PublishRequest(sequence=i, message=pb.Message(topic="T", body=str(i)))

    publisher = StreamPublisher(cast(Operations, _Short()), None, window=8)
    with pytest.raises(ValueError):
        await asyncio.wait_for(anext(publisher.run(requests())), 5)


async def _settle() -> None:
    """Let every task that can run do so (all in memory here: no I/O to wait for)."""
    for _ in range(2000):
        await asyncio.sleep(0)


async def test_a_client_that_reads_no_acks_stops_the_reader_at_the_window() -> None:
    """Audit (session 13): answers waiting for a client that does not read them count against the window,
    so a stream that never reads its acks cannot make the sidecar read, store and hold answers without
    bound (it did: the window counted only messages not yet stored)."""
    ops = _HeldOps()
    ops.release.set()
    read: list[int] = []

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(1000):
            read.append(i)
            yield pb.PublishRequest(sequence=i, message=pb.Message(topic="T", body=str(i)))

    answers = StreamPublisher(cast(Operations, ops), None, window=4).run(requests())
    assert (await anext(answers)).sequence == 0  # then the client reads no more
    await _settle()
    assert len(read) <= 4
    got = [a.sequence async for a in answers]  # reading again lets the stream go on to its end
    assert got == list(range(1, 1000)) and len(read) == 1000


async def test_a_batch_whose_stream_went_away_while_it_waited_is_not_sent() -> None:
    """Review (session 29): a stream's batch waiting in the combiner behind another stream's send was sent
    once that send returned, though its stream had gone away unanswered (its sender cancelled): its
    client publishes it again, a duplicate a cancelled Send never makes. It is dropped instead."""
    ops = _HeldOps()
    combiner = BatchCombiner(cast(Operations, ops))
    ahead = asyncio.ensure_future(combiner.send([MessageSpec(topic="T", body="a")], Ack.BROKER, None))
    await asyncio.wait_for(ops.started.wait(), 5)
    gone = asyncio.ensure_future(combiner.send([MessageSpec(topic="T", body="b")], Ack.BROKER, None))
    live = asyncio.ensure_future(combiner.send([MessageSpec(topic="T", body="c")], Ack.BROKER, None))
    await asyncio.sleep(0)  # both hand their batches in (one step each: no I/O in between)
    gone.cancel()  # its stream ends (the client cancelled): StreamPublisher.run cancels its sender
    with pytest.raises(asyncio.CancelledError):
        await gone
    ops.release.set()
    assert [cast(Outcome, o).id for o in await ahead] == ["id-a"]
    assert [cast(Outcome, o).id for o in await live] == ["id-c"]
    assert ops.batches == [1, 1]  # a, then c alone: b never left


async def test_a_batch_whose_only_stream_went_away_sends_nothing() -> None:
    ops = _HeldOps()
    combiner = BatchCombiner(cast(Operations, ops))
    ahead = asyncio.ensure_future(combiner.send([MessageSpec(topic="T", body="a")], Ack.BROKER, None))
    await asyncio.wait_for(ops.started.wait(), 5)
    gone = asyncio.ensure_future(combiner.send([MessageSpec(topic="T", body="b")], Ack.BROKER, None))
    await asyncio.sleep(0)
    gone.cancel()
    ops.release.set()
    await ahead
    after = asyncio.ensure_future(combiner.send([MessageSpec(topic="T", body="c")], Ack.BROKER, None))
    assert [cast(Outcome, o).id for o in await after] == ["id-c"]  # the combiner goes on as before
    assert ops.batches == [1, 1]


class _Client:
    """A Publish client's side of a stream: what it sends is read when the test hands it over."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[pb.PublishRequest | None] = asyncio.Queue()
        self.waiting = asyncio.Event()  # the reader asks for the next message and none is there

    def send(self, sequence: int) -> None:
        self.waiting.clear()  # set again once the reader has taken it and asks for more
        self._queue.put_nowait(
            pb.PublishRequest(sequence=sequence, message=pb.Message(topic="T", body=str(sequence)))
        )

    def end(self) -> None:
        self._queue.put_nowait(None)

    async def requests(self) -> AsyncIterator[pb.PublishRequest]:
        while True:
            if self._queue.empty():
                self.waiting.set()
            req = await self._queue.get()
            if req is None:
                return
            yield req


async def test_a_stopped_stream_reads_no_more_and_answers_what_it_read() -> None:
    ops = _HeldOps()
    client = _Client()
    publisher = StreamPublisher(cast(Operations, ops), None, window=8)
    answers = publisher.run(client.requests())
    client.send(0)
    first = asyncio.ensure_future(anext(answers))
    await asyncio.wait_for(ops.started.wait(), 5)  # 0 is on its way
    client.send(1)
    await asyncio.wait_for(client.waiting.wait(), 5)  # 1 read (it waits for the batch ahead); none after it
    publisher.stop()
    client.send(2)  # sent after the stop: never read
    ops.release.set()
    got = [(await first).sequence] + [a.sequence async for a in answers]
    assert got == [0, 1] and publisher.stopped
    assert ops.batches == [1, 1]


async def test_a_stream_stopped_before_it_runs_reads_nothing() -> None:
    ops = _HeldOps()
    client = _Client()
    client.send(0)
    publisher = StreamPublisher(cast(Operations, ops), None, window=8)
    publisher.stop()
    assert [a async for a in publisher.run(client.requests())] == [] and publisher.stopped
    assert ops.batches == []


async def test_a_stream_its_client_ended_is_not_cut_by_a_stop() -> None:
    """A client that has ended its side is waiting for its answers: the stream ends as it would (OK)."""
    ops = _HeldOps()
    client = _Client()
    client.send(0)
    client.end()
    publisher = StreamPublisher(cast(Operations, ops), None, window=8)
    answers = publisher.run(client.requests())
    first = asyncio.ensure_future(anext(answers))
    await asyncio.wait_for(ops.started.wait(), 5)
    await _settle()  # the reader has read to the end and waits for the batch in flight
    publisher.stop()
    ops.release.set()
    assert [(await first).sequence] + [a.sequence async for a in answers] == [0]
    assert not publisher.stopped


async def test_streams_opened_after_the_stop_are_stopped_at_once() -> None:
    streams = PublishStreams()
    ops = _HeldOps()
    before = StreamPublisher(cast(Operations, ops), None, window=8)
    with streams.open(before):
        streams.stop()
        assert before.stopped
    after = StreamPublisher(cast(Operations, ops), None, window=8)
    with streams.open(after):
        assert after.stopped


# --- a sharding key's order in a stream's batch sent in parts (retry.lanes) ------------------------------

KEY = "customer-7"
# How long a slow message's send waits for another message of the stream to be tried or spooled (see
# _LaneBroker): a bound, not a synchronisation. A sidecar that sends the key's later message only once
# the earlier one is answered waits it out; one that sends them at once moves on within milliseconds.
HOLD_AT_MOST_S = 0.5


class _LaneBroker:
    """Stores what it takes in arrival order; while ``down`` every send fails at once (a broker out of
    reach: connection refused). A body in ``slow`` (alone or in a batch) is not answered until another
    message has been tried here or spooled (``moved_on``), or HOLD_AT_MOST_S passed, then fails as a
    send that timed out: an earlier message whose send takes longer to fail than a later one's."""

    def __init__(self) -> None:
        self.down = False
        self.slow: set[str] = set()
        self.stored: list[tuple[str | None, str]] = []
        self._moved_on = asyncio.Event()

    def order(self, key: str) -> list[str]:
        return [body for k, body in self.stored if k == key]

    def moved_on(self) -> None:
        self._moved_on.set()

    async def _slow(self, messages: Sequence[Message]) -> bool:
        bodies = {m.body.decode() for m in messages}
        if not bodies & self.slow:
            self._moved_on.set()
            return False
        self.slow -= bodies
        try:
            await asyncio.wait_for(self._moved_on.wait(), HOLD_AT_MOST_S)
        except TimeoutError:
            pass
        return True

    def _take(self, msg: Message, sharding_key: str | None) -> SendResult:
        if self.down:
            raise RequestTimeout("connection refused")
        self.stored.append((sharding_key, msg.body.decode()))
        return SendResult(SendStatus.SEND_OK, msg.id or "", "o", MessageQueue(msg.topic, "b", 0), 0)

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        if await self._slow([msg]):
            raise RequestTimeout("the broker did not answer within the send timeout")
        return self._take(msg, sharding_key)

    async def send_batch(
        self,
        messages: Sequence[Message],
        sharding_keys: Sequence[str | None] | None = None,
        *,
        validated: bool = False,
    ) -> list[SendResult | RocketMQError]:
        keys = list(sharding_keys) if sharding_keys is not None else [None] * len(messages)
        if await self._slow(messages):
            return [RequestTimeout("the broker did not answer within the send timeout") for _ in messages]
        out: list[SendResult | RocketMQError] = []
        for m, k in zip(messages, keys, strict=True):
            try:
                out.append(self._take(m, k))
            except RocketMQError as exc:
                out.append(exc)
        return out


class _Watched:
    """The retry store as the sidecar spools into it, telling the broker when something was spooled."""

    def __init__(self, retry: RetryStore, broker: _LaneBroker) -> None:
        self._retry = retry
        self._broker = broker

    async def spool(self, record: RetryRecord, due_ms: int | None = None) -> object:
        key = await self._retry.spool(record, due_ms)
        self._broker.moved_on()
        return key

    async def spool_many(self, records: Sequence[RetryRecord], due_ms: int | None = None) -> object:
        keys = await self._retry.spool_many(records, due_ms)
        self._broker.moved_on()
        return keys


@dataclass
class _Edge:
    clock: FakeWallClock
    broker: _LaneBroker
    retry: RetryStore
    ops: Operations
    replay: ReplayLoop

    async def publish(self, *messages: tuple[str, int]) -> list[pb.PublishAck]:
        """One Publish stream of (body, ack mode) messages of KEY, read together (one batch)."""

        async def requests() -> AsyncIterator[pb.PublishRequest]:
            for seq, (body, ack) in enumerate(messages):
                message = pb.Message(topic="Orders", body=body, sharding_key=KEY)
                yield pb.PublishRequest(sequence=seq, ack=ack, message=message)  # type: ignore[arg-type]

        publisher = StreamPublisher(self.ops, None, window=16)
        return [a async for a in publisher.run(requests())]

    async def drain(self) -> None:
        """The ladder's time passing (its 1 s rung, twice), the replay settled at each step."""
        for _ in range(4):
            self.clock.advance(0.5)
            await asyncio.wait_for(self.replay.wait_idle(), 10)


@pytest.fixture
async def edge() -> AsyncIterator[_Edge]:
    """The gRPC edge's Operations over the sidecar and its retry store (MemoryKV, a fake clock) with the
    store's lanes, as app.assembly wires them; the replay started once the test brings the broker back."""
    clock = FakeWallClock()
    kv = MemoryKV((*RETRY_CFS, *DELAY_CFS))
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer, now_ms=clock.now_ms, clock=clock.monotonic)
    delay = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    broker = _LaneBroker()
    ladder = RetryPolicy((1.0,), 1000)
    sidecar = Sidecar(
        broker, _Watched(retry, broker), policy_for=lambda _t: ladder, now_ms=retry.now_ms, lanes=retry
    )
    deps = EdgeDeps(sidecar, Limits(1 << 20, 60_000), 100, Metrics(), None, clock.now_ms)
    delivery = StoreDelivery(
        broker, retry, delay, policy_for=lambda _t: ladder, now_ms=retry.now_ms, lanes=retry
    )
    replay = ReplayLoop(
        retry, delivery.redeliver, lambda _t: ladder, workers=4, deliver_batch=delivery.redeliver_batch,
        batch_max=32, sleep=clock.sleep,
    )  # fmt: skip
    yield _Edge(clock, broker, retry, Operations.of(deps, GRPC_FIELDS), replay)
    await replay.close()
    await retry.close()
    await writer.close()


@pytest.fixture
def traced() -> Iterator[None]:
    spans.configure(TracerProvider())
    try:
        yield
    finally:
        spans.configure(None)


async def test_a_keys_ack_spool_message_is_not_queued_ahead_of_the_ack_broker_one_read_before_it(
    edge: _Edge,
) -> None:
    """The broker is out of reach. m0 (ACK_BROKER) then m1 (ACK_SPOOL), one key, read as one batch. Sent
    as one batch per mode at once, m1's would be spooled first and head the key's lane, m0's send,
    slower to fail (a timeout), spooled behind it. The modes' batches go one after another when a key
    has messages in both: m0 then m1 reach the broker, the stream's order."""
    edge.broker.slow.add("m0")
    edge.broker.down = True
    acks = await edge.publish(("m0", pb.ACK_BROKER), ("m1", pb.ACK_SPOOL))
    assert [(a.sequence, a.result.status) for a in acks] == [(0, pb.SPOOLED), (1, pb.SPOOLED)]
    edge.broker.down = False
    await edge.replay.start()
    await edge.drain()
    assert edge.retry.pending_count == 0
    assert edge.broker.order(KEY) == ["m0", "m1"]


@pytest.mark.usefixtures("traced")
async def test_traced_a_keys_messages_of_one_batch_reach_the_broker_in_the_streams_order(edge: _Edge) -> None:
    """Tracing on, a stream's messages are sent each alone (a receive span each). Sent at once, m1 would
    be spooled first (m0's send takes longer to fail: a timeout) and head the key's lane. A key's
    messages go one after another: m0 then m1, as the same stream stores them with tracing off."""
    edge.broker.slow.add("m0")
    edge.broker.down = True
    acks = await edge.publish(("m0", pb.ACK_BROKER), ("m1", pb.ACK_BROKER))
    assert [(a.sequence, a.result.status) for a in acks] == [(0, pb.SPOOLED), (1, pb.SPOOLED)]
    edge.broker.down = False
    await edge.replay.start()
    await edge.drain()
    assert edge.retry.pending_count == 0
    assert edge.broker.order(KEY) == ["m0", "m1"]
