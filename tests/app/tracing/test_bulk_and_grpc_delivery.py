"""Bulk and gRPC deliveries to the app, traced: the trace context reaches the app (``traceparent`` in
each bulk entry's event; the Delivery's ``traceparent``/``tracestate`` fields over gRPC), and each
delivery makes its process (CONSUMER) and deliver (CLIENT) spans, read from the SDK's in-memory
exporter."""

from __future__ import annotations

import asyncio
import dataclasses

import orjson
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from rocksidecar.app.api.grpc_subscribe import delivery_proto
from rocksidecar.app.subscriptions.stream import Answer, Delivery, StreamHub
from rocksidecar.app.tracing import spans
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY
from rocksidecar.rmq.consumer.config import ConsumeStatus
from tests.app.subscriptions.test_bulk import SPEC as BULK_SPEC
from tests.app.subscriptions.test_bulk import answer, bulk
from tests.app.subscriptions.test_push import MQ, SPEC, Recorded, message
from tests.app.tracing.test_spans import by_name, hex_trace, process_then_deliver

TRACE_A, SPAN_A = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACE_B, SPAN_B = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TP_A, TP_B = f"00-{TRACE_A}-{SPAN_A}-01", f"00-{TRACE_B}-{SPAN_B}-01"


async def test_a_bulk_delivery_is_one_process_span_linking_each_message_s_trace(
    exporter: InMemorySpanExporter,
) -> None:
    msgs = [
        dataclasses.replace(message(**{TRACEPARENT_PROPERTY: TP_A}), queue_offset=1),
        dataclasses.replace(message(**{TRACEPARENT_PROPERTY: TP_B}), queue_offset=2),
        dataclasses.replace(message(), queue_offset=3),
        dataclasses.replace(message(**{TRACEPARENT_PROPERTY: TP_A}), queue_offset=4),  # A's again
    ]
    rec = Recorded([answer(("1", "SUCCESS"), ("2", "SUCCESS"), ("3", "RETRY"), ("4", "SUCCESS"))])
    statuses = await bulk(rec)(msgs, MQ)
    assert statuses == [ConsumeStatus.SUCCESS, ConsumeStatus.SUCCESS, ConsumeStatus.RECONSUME_LATER,
                        ConsumeStatus.SUCCESS]  # fmt: skip
    (post,) = rec.requests
    events = [entry["event"] for entry in orjson.loads(post.body)["entries"]]
    assert [e.get("traceparent") for e in events] == [TP_A, TP_B, None, TP_A]  # each its own sender's
    got = by_name(exporter)
    process, deliver = got["process T"], got["deliver T"]
    assert process.kind is SpanKind.CONSUMER and deliver.kind is SpanKind.CLIENT
    assert process.parent is None and hex_trace(process) not in (TRACE_A, TRACE_B)  # a trace of its own
    # a link to each distinct trace context: A's second message adds none
    assert [f"{link.context.span_id:016x}" for link in process.links] == [SPAN_A, SPAN_B]
    assert process.attributes and process.attributes["messaging.batch.message_count"] == 4
    assert process.attributes["messaging.consumer.group.name"] == BULK_SPEC.group
    assert deliver.parent is not None and process.context is not None
    assert deliver.parent.span_id == process.context.span_id
    assert deliver.attributes and deliver.attributes["url.full"] == BULK_SPEC.endpoint
    assert deliver.attributes["rocksidecar.delivered"] == 3  # of four


async def test_a_bulk_delivery_makes_no_span_while_tracing_is_off() -> None:
    memory = InMemorySpanExporter()
    assert not spans.ON
    rec = Recorded([answer(("1", "SUCCESS"))])
    msg = dataclasses.replace(message(**{TRACEPARENT_PROPERTY: TP_A}), queue_offset=1)
    assert await bulk(rec)([msg], MQ) == [ConsumeStatus.SUCCESS]
    assert orjson.loads(rec.requests[0].body)["entries"][0]["event"]["traceparent"] == TP_A
    assert memory.get_finished_spans() == ()


async def test_a_grpc_delivery_carries_the_trace_context_and_makes_process_and_deliver_spans(
    exporter: InMemorySpanExporter,
) -> None:
    hub = StreamHub(dataclasses.replace(SPEC, endpoint="grpc"))
    msg = message(**{TRACEPARENT_PROPERTY: TP_A, TRACESTATE_PROPERTY: "k=v"})
    consumed = asyncio.create_task(hub([msg], MQ))
    d = await hub.next()
    proto = delivery_proto(d)
    assert (proto.traceparent, proto.tracestate) == (TP_A, "k=v")  # the app continues the sender's trace
    assert not by_name(exporter)  # nothing ends before the app answers
    hub.ack(d.delivery_id, Answer.OK)
    assert await consumed is ConsumeStatus.SUCCESS
    _, deliver = process_then_deliver(exporter, TRACE_A, SPAN_A)
    assert deliver.attributes and deliver.attributes["url.full"] == "grpc"
    assert deliver.attributes["rocksidecar.delivered"] is True


async def test_a_grpc_delivery_without_a_valid_trace_context_has_empty_fields() -> None:
    proto = delivery_proto(Delivery("d1", message(**{TRACEPARENT_PROPERTY: "junk"}), MQ))
    assert (proto.traceparent, proto.tracestate) == ("", "")
    assert proto.properties[TRACEPARENT_PROPERTY] == "junk"  # still there as it came
