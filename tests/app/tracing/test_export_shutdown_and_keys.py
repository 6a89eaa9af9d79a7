"""Review (session 30) of the tracing layer's internals: the loop exporter's shutdown, the message trace
dispatcher's close and the bounds of its trace messages. Each test fails on the code as reviewed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from rocksidecar.app.tracing import loop_export, msgtrace
from rocksidecar.app.tracing.loop_export import ExportSettings, LoopBatchProcessor
from rocksidecar.rmq import Message
from rocksidecar.rmq.message import PROPERTIES_MAX_BYTES, MessageQueue, wire_properties_of
from rocksidecar.rmq.producer.batch import _unfit_properties
from rocksidecar.rmq.result import SendResult, SendStatus

OFFSET_ID = "7F00000100002A9F0000000000000ABC"


def _config(**changes: Any) -> ExportSettings:
    base: dict[str, Any] = dict(
        protocol="http/protobuf", endpoint="http://127.0.0.1:9/v1/traces", headers={}, timeout_s=10.0,
        compression=None, schedule_delay_s=3600.0, max_queue=2048, max_batch=512, export_timeout_s=30.0,
    )  # fmt: skip
    base.update(changes)
    return ExportSettings(**base)


def _end(processor: LoopBatchProcessor, n: int, name: str = "send T") -> None:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("rocksidecar")
    for i in range(n):
        tracer.start_span(f"{name} {i}", kind=SpanKind.PRODUCER).end()


class _Taking:
    """A collector that takes every request at once; counts the spans it was sent."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def send(self, body: bytes, timeout_s: float) -> tuple[str, bool] | None:
        self.bodies.append(body)
        return None

    async def close(self) -> None:
        pass


def test_a_batch_in_flight_when_the_loop_stops_is_neither_lost_nor_uncounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sidecar's loop ends (uvloop.run / asyncio.run cancel what still runs) while a batch is with a
    slow collector; then serve_cli calls the provider's shutdown. Every span ended must end up exported
    or counted (exported + failed + dropped): the in-flight batch is taken off the queue, its task is
    cancelled, and shutdown neither sends it again nor counts it."""
    entered = asyncio.Event()

    class Slow:
        async def send(self, body: bytes, timeout_s: float) -> tuple[str, bool] | None:
            entered.set()
            await asyncio.Event().wait()  # the collector has not answered when the loop stops
            return None

        async def close(self) -> None:
            pass

    taking = _Taking()
    made: list[Any] = [Slow(), taking]
    monkeypatch.setattr(loop_export, "transport", lambda config: made.pop(0))
    processor = LoopBatchProcessor(_config(max_batch=2))

    async def serve() -> None:
        _end(processor, 2)  # a full batch: exported at once, to the slow collector
        await entered.wait()
        _end(processor, 1, "queued")  # waits behind it

    asyncio.run(serve())  # returns: the export task is cancelled with the loop's other tasks
    processor.shutdown()
    assert processor.exported + processor.failed + processor.dropped == 3, (
        f"exported {processor.exported}, failed {processor.failed}, dropped {processor.dropped}"
    )


class _Clock:
    now = 0.0


def test_shutdown_with_an_unreachable_collector_is_bounded_by_the_export_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK's BatchSpanProcessor.shutdown gives up after 30 s in all. Here the rest of the queue is
    exported after the loop stopped batch by batch, each batch with a fresh OTEL_BSP_EXPORT_TIMEOUT of
    retries: a collector that is down holds the sidecar's stop for (queue / batch) x 30 s (4 x 30 s with
    the default sizes; hours with OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1). Time is a fake clock here: each
    send to the unreachable collector takes its whole timeout, each back-off its delay."""
    clock = _Clock()

    class Unreachable:
        async def send(self, body: bytes, timeout_s: float) -> tuple[str, bool] | None:
            clock.now += timeout_s  # a connect that times out
            return "connect timeout", True

        async def close(self) -> None:
            pass

    class ClockedLoop:
        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            self._loop = loop

        def time(self) -> float:
            return clock.now

        def __getattr__(self, name: str) -> Any:
            return getattr(self._loop, name)

    class Shim:  # loop_export's asyncio, but for the clock its _send reads and the back-off it sleeps
        def __getattr__(self, name: str) -> Any:
            return getattr(asyncio, name)

        @staticmethod
        def get_running_loop() -> Any:
            return ClockedLoop(asyncio.get_running_loop())

        @staticmethod
        async def sleep(delay: float) -> None:
            clock.now += delay
            await asyncio.sleep(0)

    monkeypatch.setattr(loop_export, "asyncio", Shim())
    monkeypatch.setattr(loop_export, "transport", lambda config: Unreachable())
    config = _config()  # the defaults: queue 2048, batch 512, export timeout 30 s, request timeout 10 s
    processor = LoopBatchProcessor(config)
    _end(processor, 2048)  # no loop here: they wait in the queue for shutdown (the sidecar's loop stopped)
    assert len(processor._queue) == 2048
    processor.shutdown()
    assert processor.failed == 2048
    assert clock.now <= config.export_timeout_s, f"shutdown held the stop for {clock.now:g} s"


async def test_shutdown_on_the_running_loop_exports_the_whole_queue() -> None:
    """shutdown on the bound loop ("scheduled, not waited for") must export what is queued. The export
    under way sends full batches, then breaks on a partial one expecting a timer to send it; the timer
    is not armed once closed, so the partial tail stays in the queue for good."""
    taking = _Taking()
    processor = LoopBatchProcessor(_config(max_batch=2))
    processor._transport = taking
    _end(processor, 3)  # the second span starts an export (not run yet); the third waits in the queue
    processor.shutdown()
    while processor._exporting is not None:
        await processor._exporting
    assert processor.exported == 3, f"exported {processor.exported}, {len(processor._queue)} left queued"


def _result(msg_id: str) -> SendResult:
    return SendResult(SendStatus.SEND_OK, msg_id, OFFSET_ID, MessageQueue("T", "broker-a", 1), 7)


class _Completing:
    """A trace producer whose batch sends answer once ``go`` is set; keeps the batches it completed."""

    def __init__(self) -> None:
        self.written: list[list[Message]] = []
        self.go = asyncio.Event()
        self.asked = asyncio.Event()

    async def send_batch(self, messages: Sequence[Message], *args: Any, **kwargs: Any) -> list[SendResult]:
        self.asked.set()
        await self.go.wait()
        self.written.append(list(messages))
        return [_result(f"T{i}") for i in range(len(messages))]


def _records(batches: list[list[Message]]) -> list[str]:
    return [r for batch in batches for m in batch for r in m.body.decode().split("\x02") if r]


async def test_close_while_the_writer_writes_loses_no_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """close() cancels the writer's task while its trace batch is with the broker: the records it took
    off the buffer are gone (neither written nor counted failed or dropped), and the flush close then
    runs finds an empty buffer. The broker answers at once here (``go`` set before close)."""
    monkeypatch.setattr(msgtrace, "FLUSH_S", 0)
    producer = _Completing()
    d = msgtrace.Dispatcher(producer, group="pg")
    for i in range(3):
        d.add(msgtrace._sent(Message("T", b"x", keys=(f"k{i}",)), _result(f"ID{i}"), 1000, 2))
    await producer.asked.wait()  # the writer's batch is being sent
    producer.go.set()  # the broker answers
    await d.close()
    ids = [r.split("\x01")[5] for r in _records(producer.written)]
    assert ids == ["ID0", "ID1", "ID2"], f"written {ids}; written={d.written} failed={d.failed}"


async def test_a_trace_message_s_keys_fit_a_batch_record_s_properties_in_bytes() -> None:
    """KEYS is bounded by MAX_KEYS_CHARS characters, but the broker's (and the producer's batch check,
    _unfit_properties) bound is PROPERTIES_MAX_BYTES bytes of UTF-8. Keys that are not ASCII (an order
    key in Chinese, valid for Message.validate) make a trace message's properties over 32767 bytes: the
    producer refuses that message and all its records (up to MAX_RECORDS) are lost."""
    producer = _Completing()
    producer.go.set()
    d = msgtrace.Dispatcher(producer, group="pg")
    for i in range(100):
        key = f"订单{i:03d}" + "订" * 150  # 155 characters, ~460 bytes
        Message("T", b"x", keys=(key,)).validate()  # what the app may send
        d.add(msgtrace._sent(Message("T", b"x", keys=(key,)), _result(f"ID{i:03d}"), 1000, 2))
    messages, _ = d._messages(d._buffer, msgtrace.MAX_PER_WRITE)
    wires = wire_properties_of(messages, [f"U{i}" for i in range(len(messages))])
    sizes = [len(w.encode()) for w in wires]
    await d.close()
    records = [m.body.count(b"\x02") for m in messages]
    assert max(sizes) <= PROPERTIES_MAX_BYTES, f"properties of {sizes} bytes, holding {records} records"
    assert not _unfit_properties(wires)  # the producer's check: else the message fails, all its records
