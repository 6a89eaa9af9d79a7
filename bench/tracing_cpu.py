"""What the tracing layer itself costs per message, in CPU, in one process (issue 31): the send path's
tracing hooks around a sender that answers at once, so that nothing but tracing is measured. Rows:
tracing off (the anchor: the request's trace context inherited, the one check), OpenTelemetry spans on
(receive + send spans through the sidecar's processor, app.tracing.loop_export, which batches and encodes
OTLP protobuf on the loop, into a collector that takes it at once; the same exported unencoded; the same
through the SDK's own tracer and its thread-batching processor instead of app.tracing.lite and the
loop's; requests the sampler leaves out: an
unsampled traceparent, and none under parentbased_traceidratio 0.01; and the production setting, no
traceparent under parentbased_traceidratio ``--ratio``: that share sampled), RocketMQ message trace
on (Pub records encoded and batched by the dispatcher, flushed every 200 records as its timer does at
~4 000 msg/s): for lone sends, and for batches of 10 against the same batches with tracing off (under x32
the coalescer hands the sends on in batches of 8-11, and the trace wrapper sits under it, so that is what
a sidecar's message trace costs there). Then one span alone: the SDK's start + end against
app.tracing.lite's, and the OTLP encoding of one span. CPU is user + system of this process (the
exporter's thread included), per message; modes alternate over the rounds and each row is its median.
Add the differences to the sidecar's own CPU per message (bench.compare, bench.tracing) to see what a
traced send costs.

    .venv/bin/python -m bench.tracing_cpu [--messages 20000] [--rounds 3] [--ratio 0.05]

Needs the otel extra (make install has it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import resource
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from opentelemetry.trace import SpanKind

from bench.common import Row, bench_parser, environment, print_rows
from rocksidecar.app.tracing import loop_export, msgtrace, otlp, spans
from rocksidecar.app.tracing.context import TraceContext, inherit
from rocksidecar.app.tracing.lite import LiteTracer
from rocksidecar.app.wiring import tune_gc
from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.result import SendStatus

TRACE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
UNSAMPLED = TraceContext(TRACE.traceparent[:-2] + "00")
RESULT = SendResult(
    SendStatus.SEND_OK, "AC11000100002A9F0000000000000001", "7F00000100002A9F0000000000000001",
    MessageQueue("BenchTrace", "broker-a", 1), 5,
)  # fmt: skip
BODY = b"x" * 256
COALESCED = 10  # messages per coalesced batch under bench.tracing's x32 (its coalesce metrics: 8-11)
FLUSHED_EVERY = 200  # records per flush of the message trace's writer at ~4 000 msg/s (one per 50 ms)


def _message(i: int) -> Message:
    return Message("BenchTrace", BODY, None, (), {}, 0, f"{i:032X}")


class EncodingExporter(SpanExporter):
    """Encodes each batch as the OTLP exporters do (protobuf), then drops it: no network in the figure."""

    encoded = 0

    def __init__(self, encode: bool = True) -> None:
        self.encode = encode  # False: dropped unencoded, to tell the spans' cost from the encoding's

    def export(self, batch: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.encode:
            EncodingExporter.encoded += len(otlp.encode_bytes(batch))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class _Dropped:
    """A transport whose collector takes every request at once: no network in the figure."""

    async def send(self, body: bytes, timeout_s: float) -> None:
        EncodingExporter.encoded += len(body)

    async def close(self) -> None:
        pass


class _LoopProcessor(loop_export.LoopBatchProcessor):
    """The sidecar's processor (its defaults but a queue for every span) into ``_Dropped``; ``encode``
    False: batches dropped unencoded, to tell the spans' cost from the encoding's."""

    def __init__(self, n: int, encode: bool) -> None:
        config = loop_export.settings({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
        assert config is not None
        super().__init__(dataclasses.replace(config, max_queue=2 * n))
        self._transport = _Dropped()
        self._encode = encode

    async def _send(self, taken: loop_export.Batch, deadline: float) -> None:
        if self._encode:
            await super()._send(taken, deadline)
        else:
            self.exported += taken.spans


class Instant:
    """A sender that stored every message already."""

    async def send(self, msg: Message, *args: Any, **kwargs: Any) -> SendResult:
        return RESULT

    async def send_batch(self, messages: Sequence[Message], *args: Any, **kwargs: Any) -> list[SendResult]:
        return [RESULT] * len(messages)


def sidecar_gc() -> Callable[[], None]:
    """The collector as the sidecar runs it (app.wiring.tune_gc: rare young collections, start-up
    frozen); returns what puts the process's back."""
    thresholds = gc.get_threshold()
    tune_gc()

    def restore() -> None:
        gc.unfreeze()
        gc.set_threshold(*thresholds)

    return restore


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def per_message_us(mode: str, n: int) -> float:
    """CPU microseconds per message of ``n`` sends in ``mode`` (off, otel..., msgtrace)."""
    sender: Any = Instant()
    provider = dispatcher = on_loop = None
    trace_context: TraceContext | None = TRACE
    if mode == "otel-unsampled":
        trace_context = UNSAMPLED
    elif mode.startswith("otel-ratio:"):
        trace_context = None  # a root: the sampler's ratio decides
    if mode.startswith("otel"):
        ratio = ParentBasedTraceIdRatio(float(mode[11:])) if mode.startswith("otel-ratio:") else None
        provider = TracerProvider(sampler=ratio, shutdown_on_exit=False)
        if mode == "otel-sdk":  # the SDK's tracer with the SDK's thread-batching processor, as before lite
            exporter = EncodingExporter()
            provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=2 * n))
        else:  # the sidecar's: the loop batches and encodes (app.tracing.loop_export), no network here
            on_loop = _LoopProcessor(n, encode=mode != "otel-noencode")
            provider.add_span_processor(on_loop)
        spans.configure(provider, lite=mode != "otel-sdk")
        sender = spans.TracedSender(sender, background=False)
    elif mode.startswith("msgtrace"):
        dispatcher = msgtrace.Dispatcher(Instant(), group="bench")
        sender = msgtrace.MsgTraceSender(sender, dispatcher)
    restore = sidecar_gc()
    started = cpu_s()
    try:
        if mode.endswith("batch"):  # as the coalescer hands x32's sends on: batches of COALESCED
            for i in range(0, n, COALESCED):
                batch = [inherit(_message(j), TRACE) for j in range(i, min(n, i + COALESCED))]
                await sender.send_batch(batch, validated=True)
                if dispatcher is not None and (i + COALESCED) % FLUSHED_EVERY == 0:
                    await dispatcher.flush()
        for i in range(n if mode.endswith("batch") else 0, n):
            msg = _message(i)
            if trace_context is not None:
                msg = inherit(msg, trace_context)
            if spans.ON:
                await spans.receive(msg, lambda m: sender.send(m, validated=True))
            else:
                await sender.send(msg, validated=True)
            if dispatcher is not None and (i + 1) % FLUSHED_EVERY == 0:
                await dispatcher.flush()
        if on_loop is not None:
            await on_loop._drain()  # the export of these spans belongs to the figure
        if provider is not None:
            provider.force_flush()
        if dispatcher is not None:
            await dispatcher.close()
    finally:
        spans.configure(None)
        if provider is not None:
            provider.shutdown()
        restore()
    return (cpu_s() - started) / n * 1e6


SEND_ATTRIBUTES = {"messaging.system": "rocketmq", "messaging.operation.type": "send",
    "messaging.operation.name": "send", "messaging.destination.name": "BenchTrace",
    "messaging.message.id": "0" * 32, "messaging.message.body.size": 256,
    "messaging.destination.partition.id": "1", "messaging.rocketmq.broker": "broker-a",
    "rocksidecar.attempts": 1,
}  # fmt: skip


def per_span_us(n: int) -> dict[str, float]:
    """One span with the send span's 9 attributes, under a sampled parent: CPU microseconds of the SDK's
    start + end, of app.tracing.lite's, both into a batching processor whose exporter drops the spans,
    and of the OTLP encoding of such a span (in batches of 512, as the exporter does): the SDK's
    encode_spans and app.tracing.otlp's encode."""
    parent = trace.set_span_in_context(trace.NonRecordingSpan(spans.span_context(TRACE)))
    got: dict[str, float] = {}
    for name in ("sdk", "lite"):
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(EncodingExporter(encode=False), max_queue_size=2 * n))
        sdk = provider.get_tracer("bench")
        tracer = LiteTracer(sdk) if name == "lite" else sdk  # type: ignore[arg-type]
        started = cpu_s()
        for _ in range(n):
            tracer.start_span("send BenchTrace", parent, SpanKind.PRODUCER, dict(SEND_ATTRIBUTES)).end()
        provider.force_flush()
        got[name] = (cpu_s() - started) / n * 1e6
        provider.shutdown()
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lite = LiteTracer(provider.get_tracer("bench"))  # type: ignore[arg-type]
    for i in range(512):  # each span its own message id, as the sidecar's are (it misses the cache)
        attrs = {**SEND_ATTRIBUTES, "messaging.message.id": f"{i:032X}"}
        lite.start_span("send BenchTrace", parent, SpanKind.PRODUCER, attrs).end()
    batch = memory.get_finished_spans()
    started = cpu_s()
    for _ in range(max(1, n // 512)):
        encode_spans(batch).SerializeToString()
    got["encode"] = (cpu_s() - started) / (max(1, n // 512) * 512) * 1e6
    started = cpu_s()
    for _ in range(max(1, n // 512)):
        otlp.encode_bytes(batch)
    got["encode-otlp"] = (cpu_s() - started) / (max(1, n // 512) * 512) * 1e6
    return got


async def measure(n: int, rounds: int, ratio: float) -> dict[str, float]:
    runs: dict[str, list[float]] = {
        "off": [],
        "otel": [],
        "otel-noencode": [],
        "otel-sdk": [],
        "otel-unsampled": [],
        "otel-ratio:0.01": [],
        f"otel-ratio:{ratio}": [],
        "msgtrace": [],
        "off-batch": [],
        "msgtrace-batch": [],
    }
    await per_message_us("otel", n // 10)  # warm up the SDK's imports and caches
    for r in range(rounds):
        modes = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for mode in modes:
            runs[mode].append(await per_message_us(mode, n))
    return {mode: statistics.median(v) for mode, v in runs.items()}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ratio", type=float, default=0.05, help="the production row's sampling ratio")
    args = parser.parse_args()
    if not 0.0 < args.ratio <= 1.0:
        parser.error("--ratio must be in (0, 1]")
    print(f"bench.tracing_cpu: {args.messages} messages x {args.rounds} rounds; {environment()}", flush=True)
    got = asyncio.run(measure(args.messages, args.rounds, args.ratio))
    span_runs = [per_span_us(args.messages) for _ in range(args.rounds)]
    one = {k: statistics.median(r[k] for r in span_runs) for k in span_runs[0]}
    off, production = got["off"], got[f"otel-ratio:{args.ratio}"]
    rows = [
        Row("tracing off: inherit + send (anchor)", off, "us", off),
        Row("OTel spans on: receive + send spans, batching OTLP encode", got["otel"], "us", off),
        Row("  the same, exported unencoded (the spans' own cost)", got["otel-noencode"], "us", off),
        Row("  the same with the SDK's own tracer (before app.tracing.lite)", got["otel-sdk"], "us", off),
        Row("OTel on, unsampled traceparent (the sample-free path)", got["otel-unsampled"], "us", off),
        Row("OTel on, no traceparent, parentbased_traceidratio 0.01", got["otel-ratio:0.01"], "us", off),
        Row(
            f"OTel on, no traceparent, parentbased_traceidratio {args.ratio} (production)",
            production,
            "us",
            off,
        ),
        Row("RocketMQ message trace on: Pub record, batched", got["msgtrace"], "us", off),
        Row("added by OTel spans", got["otel"] - off, "us"),
        Row("added by OTel spans, the SDK's own tracer", got["otel-sdk"] - off, "us"),
        Row("added by message trace", got["msgtrace"] - off, "us"),
        Row(f"batches of {COALESCED} (the coalescer's, as under x32), tracing off", got["off-batch"], "us"),
        Row(f"  message trace on, batches of {COALESCED}", got["msgtrace-batch"], "us", got["off-batch"]),
        Row("added by message trace, coalesced sends", got["msgtrace-batch"] - got["off-batch"], "us"),
        Row("added by OTel on, unsampled traceparent", got["otel-unsampled"] - off, "us"),
        Row("added by OTel on, no traceparent, ratio 0.01", got["otel-ratio:0.01"] - off, "us"),
        Row(f"added by OTel on, no traceparent, ratio {args.ratio}", production - off, "us"),
    ]
    print_rows("CPU per message (median of the rounds; ratio to tracing off)", rows)
    span_rows = [
        Row("the SDK's start_span + end, batching processor, no export", one["sdk"], "us", one["sdk"]),
        Row("app.tracing.lite's start_span + end, the same", one["lite"], "us", one["sdk"]),
        Row("OTLP encoding of the span (encode_spans + SerializeToString)", one["encode"], "us", one["sdk"]),
        Row("  the same by app.tracing.otlp (what the exporters use)", one["encode-otlp"], "us", one["sdk"]),
    ]
    print_rows("CPU per span, 9 attributes (median of the rounds; ratio to the SDK's)", span_rows)
    print(f"load average after: {environment()}")


if __name__ == "__main__":
    main()
