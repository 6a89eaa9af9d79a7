"""OTLP encoding of exported spans at a fraction of the exporters' own cost (issue 31, bench/RESULTS.md:
spancost).

The OTLP exporters encode a batch with ``encode_spans``, which builds a protobuf ``KeyValue`` and an
``AnyValue`` per attribute and copies them into a ``Span`` message: ~45 us per span of the sidecar's
(bench.tracing_cpu), two thirds of what a sampled request costs, spent in the export thread and so
under the GIL with the event loop. Most of a span's attributes repeat from span to span (the system,
the operation, the topic, the broker), so ``encode`` serialises each distinct attribute once, as a
one-attribute ``Span``, and keeps the bytes: a span is then its own fields serialised as one message,
the cached attributes' bytes after them, parsed into the request by protobuf (serialised messages of
one type concatenate into their merge, repeated fields appended in order). The request equals
``encode_spans``'s for the same spans (tests/app/tracing/test_otlp.py compares them).

``exporter`` builds the OTLP exporter ``OTEL_EXPORTER_OTLP_PROTOCOL`` names (configured by the standard
``OTEL_*`` variables as before) with this encoding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_key_value,
    _encode_resource,
)
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import (
    _SPAN_KIND_MAP,
    _encode_events,
    _encode_links,
    _encode_status,
    _encode_trace_state,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, SpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace.status import Status, StatusCode

from ..bounded import remember

MAX_CACHED = 4096  # distinct attributes kept encoded; past it the cache starts again (message ids churn)
_CACHEABLE = (str, bool, int, float)  # hashable scalars; a list (message keys) is encoded each time
_cache: dict[tuple[str, type, Any], bytes] = {}
_Span: Any = PbSpan  # its stubs want every field set; encode_spans passes None for the unset ones
_statuses: dict[tuple[StatusCode, str | None], bytes] = {}
# a span's name, kind, flags and status serialised together, by (name, id(kind), remote, code, description)
_fixed: dict[tuple[str, int, bool, StatusCode, str | None], bytes] = {}
# _span_flags's and _SPAN_KIND_MAP's answers read once: the protobuf enum wrapper's attribute access and
# an Enum's hash are Python calls, per span
_LOCAL: int = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE: int = _LOCAL | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_KINDS: dict[int, int] = {id(kind): value for kind, value in _SPAN_KIND_MAP.items()}


def _attribute(key: str, value: Any) -> bytes:
    """``key = value`` serialised as a one-attribute Span (its ``attributes`` field alone)."""
    kind = type(value)
    if kind not in _CACHEABLE:
        return _one(key, value)
    cached = (key, kind, value)  # the type too: True and 1 are equal keys of a dict
    got = _cache.get(cached)
    return got if got is not None else remember(_cache, cached, _one(key, value), MAX_CACHED)


def _one(key: str, value: Any) -> bytes:
    got: bytes = _Span(attributes=[_encode_key_value(key, value)]).SerializePartialToString()
    return got


def _span(span: ReadableSpan) -> bytes:
    """``span`` as a serialised OTLP Span: what encode_spans makes of it. Its fields that repeat from
    span to span (name, kind, flags, status) are serialised once per distinct set (``_fixed``); only the
    ids and times are a new message per span (bench/RESULTS.md: tracelight)."""
    sc: Any = span.get_span_context()  # a ReadableSpan's is always set
    parent = span.parent
    events = span.events
    links = span.links
    state = sc.trace_state
    head: bytes = _Span(
        trace_id=sc.trace_id.to_bytes(16, "big"),
        span_id=sc.span_id.to_bytes(8, "big"),
        parent_span_id=parent.span_id.to_bytes(8, "big") if parent else None,
        start_time_unix_nano=span.start_time,
        end_time_unix_nano=span.end_time,
    ).SerializePartialToString()
    if state or events or links:
        head += _Span(
            trace_state=_encode_trace_state(state),
            events=_encode_events(events) if events else None,
            links=_encode_links(links) if links else None,
        ).SerializePartialToString()
    dropped = (span.dropped_attributes, span.dropped_events, span.dropped_links)
    if any(dropped):
        head += _Span(
            dropped_attributes_count=dropped[0],
            dropped_events_count=dropped[1],
            dropped_links_count=dropped[2],
        ).SerializePartialToString()
    remote = parent is not None and parent.is_remote
    status = span.status
    key = (span.name, id(span.kind), remote, status.status_code, status.description)
    fixed = _fixed.get(key)
    if fixed is None:
        fixed = _Span(
            name=span.name, kind=_KINDS[id(span.kind)], flags=_REMOTE if remote else _LOCAL
        ).SerializePartialToString() + _status(status)
        remember(_fixed, key, fixed, MAX_CACHED)
    head += fixed
    attributes: Mapping[str, Any] | None = span.attributes
    if not attributes:
        return head
    parts = [head]
    get = _cache.get
    for k, v in attributes.items():  # the cache read inline: a call per attribute is a third of its cost
        kind = type(v)
        got = get((k, kind, v)) if kind in _CACHEABLE else None
        parts.append(got if got is not None else _attribute(k, v))
    return b"".join(parts)


def _status(status: Status) -> bytes:
    """``status`` serialised as a Span's ``status`` field (one per code and description, cached)."""
    cached = (status.status_code, status.description)
    got = _statuses.get(cached)
    if got is None:
        encoded = _Span(status=_encode_status(status)).SerializePartialToString()
        got = remember(_statuses, cached, encoded, MAX_CACHED)
    return got


def encode(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The OTLP request of ``spans``, grouped by resource then instrumentation scope (as encode_spans)."""
    grouped: dict[Any, dict[Any, list[ReadableSpan]]] = {}
    for span in spans:
        grouped.setdefault(span.resource, {}).setdefault(span.instrumentation_scope or None, []).append(span)
    request = ExportTraceServiceRequest()
    for resource, scopes in grouped.items():
        resource_spans: ResourceSpans = request.resource_spans.add()
        resource_spans.resource.CopyFrom(_encode_resource(resource))
        if resource.schema_url:
            resource_spans.schema_url = resource.schema_url
        for scope, members in scopes.items():
            scope_spans: ScopeSpans = resource_spans.scope_spans.add()
            scope_spans.scope.CopyFrom(_encode_instrumentation_scope(scope))
            if scope is not None and scope.schema_url:
                scope_spans.schema_url = scope.schema_url
            add = scope_spans.spans.add
            for span in members:
                add().MergeFromString(_span(span))
    return request


def exporter(protocol: str) -> SpanExporter:
    """The OTLP span exporter of ``protocol`` (``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``, else
    gRPC), configured by the ``OTEL_*`` variables, encoding with ``encode``."""
    if protocol.startswith("http"):
        return _http()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

    class GrpcExporter(Grpc):
        def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
            return encode(data)

    return GrpcExporter()


def _http() -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http import trace_exporter as http

    try:  # the parts of the 1.45 exporter's export; another SDK's exporter exports as it does
        from opentelemetry.exporter.otlp.proto.http._common import (
            RequestPayloadTooLargeError,
            _is_request_too_large,
        )
        from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE
    except ImportError:
        return http.OTLPSpanExporter()

    class HttpExporter(http.OTLPSpanExporter):
        """The SDK's OTLP/HTTP exporter's ``export`` (metrics, size check, the client's post) with
        ``encode``."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            client = getattr(self, "_client", None)
            metrics = getattr(self, "_metrics", None)
            if self._shutdown or client is None or metrics is None:
                return super().export(spans)
            with metrics.export_operation(len(spans)) as result:
                try:
                    data = encode(spans).SerializePartialToString()
                except Exception as error:  # the SDK's rule: an export never raises
                    http._logger.error("Failed to encode span batch: %s", error)
                    result.error = error
                    return SpanExportResult.FAILURE
                if _is_request_too_large(data, self._max_request_size):
                    http._logger.warning(
                        "Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                        len(data),
                        self._max_request_size,
                    )
                    result.error = RequestPayloadTooLargeError(
                        f"Serialized span request size {len(data)} bytes exceeds max_request_size "
                        f"{self._max_request_size} bytes."
                    )
                    return SpanExportResult.FAILURE
                sent = client.export(data)
                if not sent.success:
                    result.error = sent.error
                    status = sent.status_code
                    result.error_attrs = {HTTP_RESPONSE_STATUS_CODE: status} if status is not None else None
                    return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

    return HttpExporter()
