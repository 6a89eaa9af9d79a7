"""app.tracing.otlp: the cheaper OTLP encoding must give the request the SDK's encode_spans gives, and
the exporter built with it must post that request (decoded from what a local collector received)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
    set_span_in_context,
)
from opentelemetry.trace.status import Status, StatusCode

from rocksidecar.app.tracing import otlp, spans
from rocksidecar.app.tracing.lite import LiteTracer

PARENT = SpanContext(
    0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=TraceState([("vendor", "v1")]),
)  # fmt: skip


def made_spans() -> list[ReadableSpan]:
    """Spans of every shape the sidecar makes (and some it does not): lite and SDK-made, root and
    child, links, events, an error status, attribute values of each type (True and 1 apart)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "spancost-test"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sdk = provider.get_tracer("rocksidecar")
    lite = LiteTracer(sdk)  # type: ignore[arg-type]
    under = set_span_in_context(NonRecordingSpan(PARENT))
    for tracer in (lite, sdk):
        for i in range(3):
            attrs = {"messaging.system": "rocketmq", "messaging.message.id": f"{i:032X}", "flag": i == 1,
                     "n": 1, "ratio": 0.5, "messaging.rocketmq.message.keys": ["k1", f"k{i}"]}  # fmt: skip
            span = tracer.start_span(f"send T{i}", under, SpanKind.PRODUCER, attrs, [Link(PARENT)])
            span.add_event("send attempt failed", {"rocksidecar.attempt": f"broker-{i}"})
            if i == 2:
                span.set_status(Status(StatusCode.ERROR, "SendFailed: no route"))
            span.end()
        tracer.start_span("receive T", None, SpanKind.SERVER).end()  # a root, no attributes
    return list(memory.get_finished_spans())


def test_the_request_equals_the_sdk_encoders() -> None:
    batch = made_spans()
    assert len(batch) == 8
    for _ in range(2):  # the second time from the cache
        assert otlp.encode(batch) == encode_spans(batch)
    assert otlp.encode([]) == encode_spans([])


def test_the_bytes_parse_into_that_request_across_resources_scopes_and_schema_urls() -> None:
    """encode_bytes writes the request's framing itself: several resources and scopes, schema URLs on
    both, and spans whose encoding is longer than one length byte holds."""
    batch = made_spans()
    for schema in ("", "https://opentelemetry.io/schemas/1.26.0"):
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource({"service.name": "other", "x": "y" * 300}, schema))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        for scope in ("a", "b"):
            tracer = provider.get_tracer(scope, "1.0", schema_url=schema)
            tracer.start_span("s", None, SpanKind.CLIENT, {"long": "z" * 500}).end()
        batch += memory.get_finished_spans()
    encoded = otlp.encode_bytes(batch)
    assert ExportTraceServiceRequest.FromString(encoded) == encode_spans(batch)
    assert len(encode_spans(batch).resource_spans) == 3


def test_an_unencodable_attribute_is_dropped_not_the_batch_as_the_sdks_encoder_does() -> None:
    """A lone surrogate in a string attribute: the SDK's encoder logs and drops that attribute; before
    session 14 this encoder raised, and the export of the whole batch (up to 512 spans) failed."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lite = LiteTracer(provider.get_tracer("t"))  # type: ignore[arg-type]
    lite.start_span("s", None, attributes={"k": "\ud800", "ok": "v", "n": 1}).end()
    batch = [*memory.get_finished_spans(), *made_spans()]
    request = ExportTraceServiceRequest.FromString(otlp.encode_bytes(batch))
    assert request == encode_spans(batch)
    kept = request.resource_spans[0].scope_spans[0].spans[0].attributes
    assert [a.key for a in kept] == ["ok", "n"]


def test_links_of_every_shape_are_written_as_the_sdks_encoder_writes_them() -> None:
    """Links are written directly (a batch request's span links to each message's trace): remote and
    local, with and without attributes of each type, an unencodable one (dropped), dropped attributes,
    a trace state (not encoded, as the SDK does not), and a full set of spans.MAX_LINKS."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sdk = provider.get_tracer("rocksidecar")
    local = SpanContext(0x1, 0x2, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    attrs = {"s": "v", "n": 7, "b": True, "f": 0.25, "l": ["a", "b"], "bad": "\ud800"}
    many = [Link(SpanContext(i + 1, i + 2, is_remote=bool(i % 2))) for i in range(spans.MAX_LINKS)]
    for tracer in (LiteTracer(sdk), sdk):  # type: ignore[arg-type]
        # links of their own: the SDK's tracer replaces a link's attributes with a copy it bounds
        bounded = BoundedAttributes(maxlen=1, attributes={"one": "1", "two": "2"})  # one kept, one dropped
        none_kept = BoundedAttributes(maxlen=0, attributes={"one": "1"})  # a limit of 0: all dropped
        links = [Link(PARENT), Link(local), Link(PARENT, attrs), Link(local, bounded), Link(local, none_kept)]
        tracer.start_span("receive", None, SpanKind.SERVER, {"k": "v"}, links).end()
        tracer.start_span("receive", None, SpanKind.SERVER, None, many).end()
    batch = list(memory.get_finished_spans())
    request = ExportTraceServiceRequest.FromString(otlp.encode_bytes(batch))
    assert request == encode_spans(batch)
    written = request.resource_spans[0].scope_spans[0].spans
    assert [len(s.links) for s in written] == [5, spans.MAX_LINKS, 5, spans.MAX_LINKS]
    assert [link.dropped_attributes_count for link in written[0].links] == [0, 0, 0, 1, 1]
    assert [link.flags for link in written[0].links] == [0x300, 0x100, 0x300, 0x100, 0x100]


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16_383, 16_384, 2**21, 2**35])
def test_varint_is_protobufs(n: int) -> None:
    from google.protobuf.internal.encoder import _VarintBytes

    assert otlp._varint(n) == _VarintBytes(n)


def test_the_cache_is_bounded_and_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp, "MAX_CACHED", 4)
    otlp._cache.clear()
    batch = made_spans()
    assert otlp.encode(batch) == encode_spans(batch)
    assert 0 < len(otlp._cache) <= 4


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes] = []
    status = 200

    def do_POST(self) -> None:
        _Collector.bodies.append(self.rfile.read(int(self.headers.get("content-length") or 0)))
        self.send_response(_Collector.status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()


def test_the_http_exporter_posts_that_request(collector: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector)
    _Collector.bodies.clear()
    _Collector.status = 200
    exporter = otlp.exporter("http/protobuf")
    batch = made_spans()
    try:
        assert exporter.export(batch) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert len(_Collector.bodies) == 1
    assert ExportTraceServiceRequest.FromString(_Collector.bodies[0]) == encode_spans(batch)


def test_a_refused_export_is_a_failure(collector: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector)
    _Collector.status = 400  # not one the exporter retries
    exporter = otlp.exporter("http/protobuf")
    try:
        assert exporter.export(made_spans()) is SpanExportResult.FAILURE
    finally:
        _Collector.status = 200
        exporter.shutdown()


def test_the_grpc_exporter_translates_with_it() -> None:
    exporter = otlp.exporter("grpc")
    try:
        batch = made_spans()
        assert exporter._translate_data(batch) == encode_spans(batch)  # type: ignore[attr-defined]
    finally:
        exporter.shutdown()


@pytest.mark.parametrize("asked", ["htp/protobuf", "http/json", "udp"])
def test_another_protocol_is_no_exporter_rather_than_grpc(asked: str) -> None:
    """Found by a review (session 29): anything not starting with "http" was taken for gRPC (and
    http/json for http/protobuf)."""
    with pytest.raises(ValueError, match="must be grpc or http/protobuf"):
        otlp.exporter(asked)


def test_a_preset_stands_for_the_first_attributes_until_one_of_them_is_set_again() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lite = LiteTracer(provider.get_tracer("rocksidecar"))  # type: ignore[arg-type]
    named = {
        "messaging.system": "rocketmq",
        "messaging.operation.type": "send",
        "messaging.destination.name": "T",
    }
    preset = otlp.preset(named)
    assert preset.leading == 3 and otlp.attributes_bytes(named) == preset.encoded
    kept = lite.child("send T", PARENT, SpanKind.PRODUCER, {**named, "messaging.message.id": "M1"}, preset)
    changed = lite.child("send T", PARENT, SpanKind.PRODUCER, {**named, "messaging.message.id": "M2"}, preset)
    assert kept is not None and changed is not None
    kept.set_attribute("rocksidecar.attempts", 1)  # a later attribute: the preset still stands
    changed.set_attributes({"messaging.destination.name": "U"})  # a preset one: the preset goes
    assert kept._preset is preset and changed._preset is None
    kept.end()
    changed.end()
    batch = list(memory.get_finished_spans())
    assert otlp.encode(batch) == encode_spans(batch)
    assert dict(batch[1].attributes or {})["messaging.destination.name"] == "U"


@given(key=st.text(min_size=1, max_size=150), value=st.text(max_size=300))
def test_a_string_attribute_is_protobufs_whatever_its_lengths(key: str, value: str) -> None:
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_key_value
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

    try:
        k, v = key.encode(), value.encode()
    except UnicodeEncodeError:  # a lone surrogate: dropped before it gets here
        return
    expected = PbSpan(attributes=[_encode_key_value(key, value)]).SerializePartialToString()
    assert otlp._string_attribute(k, v) == expected
