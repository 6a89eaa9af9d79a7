"""bench.tracing_floor: the floor's OTLP request must hold the spans the sidecar makes for a request (so
that its cost is the cost of those spans): receive under the traceparent, send under receive, with the
message's own attributes."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench import tracing_floor


def test_the_floor_writes_a_request_with_each_message_s_receive_and_send_spans() -> None:
    records = [tracing_floor.record(f"{i:032X}", 100 + i, i, "broker-b") for i in range(3)]
    request = ExportTraceServiceRequest.FromString(tracing_floor.encode(records))
    (resource_spans,) = request.resource_spans
    assert resource_spans.resource.attributes[0].value.string_value == "rocksidecar"
    spans = list(resource_spans.scope_spans[0].spans)
    assert [s.name for s in spans] == ["receive BenchTrace", "send BenchTrace"] * 3
    for i, (receive, send) in enumerate(zip(spans[::2], spans[1::2], strict=True)):
        assert receive.trace_id == send.trace_id == tracing_floor.TRACE_ID.to_bytes(16, "big")
        assert receive.parent_span_id == tracing_floor.PARENT_ID.to_bytes(8, "big")
        assert send.parent_span_id == receive.span_id
        assert receive.start_time_unix_nano <= send.start_time_unix_nano <= send.end_time_unix_nano
        assert send.end_time_unix_nano <= receive.end_time_unix_nano
        attrs = {a.key: a.value for a in send.attributes}
        assert attrs["messaging.message.id"].string_value == f"{i:032X}"
        assert attrs["messaging.message.body.size"].int_value == 100 + i
        assert attrs["messaging.destination.partition.id"].string_value == str(i)
        assert attrs["messaging.system"].string_value == "rocketmq"


def test_the_floor_measures_a_positive_cost() -> None:
    assert tracing_floor.floor_us(600) > 0
