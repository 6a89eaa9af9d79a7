"""OTLP encoding of exported spans at a fraction of the exporters' own cost (issue 31, bench/RESULTS.md:
spancost).

The OTLP exporters encode a batch with ``encode_spans``, which builds a protobuf ``KeyValue`` and an
``AnyValue`` per attribute and copies them into a ``Span`` message: ~45 us per span of the sidecar's
(bench.tracing_cpu), two thirds of what a sampled request costs, spent in the export thread and so
under the GIL with the event loop. Most of a span's attributes repeat from span to span (the system,
the operation, the topic, the broker), so ``encode`` serialises each distinct attribute once, as a
one-attribute ``Span``, and keeps the bytes; a span's ids and times are written in protobuf's wire
format directly, and the request's framing too (``encode_bytes``): no protobuf message per span is
built, parsed or copied (serialised fields of one message concatenate into it, repeated ones appended
in order). The request parses into what ``encode_spans`` gives for the same spans
(tests/app/tracing/test_otlp.py compares them).

``exporter`` builds the OTLP exporter ``OTEL_EXPORTER_OTLP_PROTOCOL`` names (configured by the standard
``OTEL_*`` variables as before) with this encoding.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_key_value,
    _encode_resource,
)
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import (
    _SPAN_KIND_MAP,
    _encode_events,
    _encode_status,
    _encode_trace_state,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace.span import DEFAULT_TRACE_STATE
from opentelemetry.trace.status import Status, StatusCode

from rocksidecar.rmq import SendResult

from ..bounded import remember
from .fast import FastSpan, Sent
from .lite import UNSET, LiteSpan, Preset
from .semconv import BODY_SIZE, MESSAGE_ID, Facts, result_attributes, tags_and_keys

MAX_CACHED = 4096  # distinct attributes kept encoded; past it the cache starts again (message ids churn)
_CACHEABLE = (str, bool, int, float)  # hashable scalars; a list (message keys) is encoded each time
# attributes whose value is new on every span: encoded each time, never filling the cache
_UNIQUE = frozenset({"messaging.message.id"})
_cache: dict[tuple[str, type, Any], bytes] = {}
_unencodable: set[str] = set()  # attribute keys whose value could not be encoded, logged once each
log = logging.getLogger(__name__)
_Span: Any = PbSpan  # its stubs want every field set; encode_spans passes None for the unset ones
_statuses: dict[tuple[StatusCode, str | None], bytes] = {}
# a span's name, kind, flags and status serialised together, by (name, id(kind), remote, code, description)
_fixed: dict[tuple[str, int, bool, StatusCode, str | None], bytes] = {}
_fixed_unset: dict[
    tuple[str, int, bool], bytes
] = {}  # the same for an unset status, by (name, id(kind), remote)
# _span_flags's and _SPAN_KIND_MAP's answers read once: the protobuf enum wrapper's attribute access and
# an Enum's hash are Python calls, per span
_LOCAL: int = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_REMOTE: int = _LOCAL | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_KINDS: dict[int, int] = {id(kind): value for kind, value in _SPAN_KIND_MAP.items()}
_LINK_LOCAL, _LINK_REMOTE = (b"\x35" + flags.to_bytes(4, "little") for flags in (_LOCAL, _REMOTE))
# Wire-format tags (field number << 3 | wire type) of the fields written directly: Span's trace_id (1),
# span_id (2), parent_span_id (4) (length-delimited, 2), start and end times (7, 8: fixed64, 1); the
# request's resource_spans (1), a ResourceSpans' resource (1) and scope_spans (2), a ScopeSpans' scope
# (1) and spans (2), either's schema_url (3). Ids are fixed-length, so their length byte is in the tag.
_TRACE_ID, _SPAN_ID, _PARENT_ID = b"\x0a\x10", b"\x12\x08", b"\x22\x08"
_START, _END = b"\x39", b"\x41"
# A FastSpan's ids and times with their tags in one call (a third less than ten parts joined): trace id,
# span id, parent span id (a root has none), then start and end as little-endian fixed64
_ids = struct.Struct("<2s16s2s8s2s8scQcQ").pack
_root_ids = struct.Struct("<2s16s2s8scQcQ").pack
_RESOURCE_SPANS = _RESOURCE = _SCOPE = b"\x0a"
_SCOPE_SPANS = _SPANS = b"\x12"
_SCHEMA_URL = b"\x1a"
# a Span's attributes (9), a KeyValue's key (1) and value (2), an AnyValue's string_value (1)
_ATTRIBUTES, _KEY, _VALUE, _STRING_VALUE = b"\x4a", b"\x0a", b"\x12", b"\x0a"
# a Span's links (13); a Link's attributes (4), dropped_attributes_count (5) and flags (6, fixed32)
_LINKS, _LINK_ATTRIBUTES, _LINK_DROPPED = b"\x6a", b"\x22", b"\x28"
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]
_TWO_BYTES = [b"" if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(0x4000)]  # varints
_MESSAGE_ID = MESSAGE_ID.encode()
# the message id attribute's field up to the id's bytes, by the id's length, while every length fits a byte
_ID_HEADS = {
    n: b"".join((_ATTRIBUTES, _ONE_BYTE[len(_MESSAGE_ID) + n + 6], _KEY, _ONE_BYTE[len(_MESSAGE_ID)],
                 _MESSAGE_ID, _VALUE, _ONE_BYTE[n + 2], _STRING_VALUE, _ONE_BYTE[n]))
    for n in range(0x80 - len(_MESSAGE_ID) - 6)
}  # fmt: skip
# a FastSpan send's result attributes by (queue id, broker, attempts), its body size's by size: encoded once
_results: dict[tuple[int, str, int], bytes] = {}
_sizes: dict[int, bytes] = {}


def _attribute(key: str, value: Any) -> bytes:
    """``key = value`` serialised as a one-attribute Span (its ``attributes`` field alone)."""
    kind = type(value)
    if kind not in _CACHEABLE or key in _UNIQUE:
        return _one(key, value)
    cached = (key, kind, value)  # the type too: True and 1 are equal keys of a dict
    got = _cache.get(cached)
    return got if got is not None else remember(_cache, cached, _one(key, value), MAX_CACHED)


def _one(key: str, value: Any) -> bytes:
    if type(value) is str:  # most attributes, and the one that misses the cache every span (the message id)
        try:
            return _string_attribute(key.encode(), value.encode())
        except UnicodeEncodeError:
            pass  # a lone surrogate: dropped below, as the SDK's encoder drops it
    try:
        got: bytes = _Span(attributes=[_encode_key_value(key, value)]).SerializePartialToString()
    except Exception as error:  # the SDK's encoder's rule: the attribute is dropped, not the batch
        if len(_unencodable) < MAX_CACHED and key not in _unencodable:  # once per key: values may be hostile
            _unencodable.add(key)
            log.warning("span attribute %r cannot be encoded, dropped: %s", key[:200], error)
        return b""
    return got


def _string_attribute(key: bytes, value: bytes) -> bytes:
    """A Span's ``attributes`` field of a KeyValue whose AnyValue is ``string_value``, in wire format.
    When every length fits a one-byte varint (a message id, most values) it is one join."""
    k, n = len(key), len(value)
    inner = k + n + 6  # the key's tag and length, the value's, the AnyValue's string's, and the bytes
    if inner < 0x80:
        one = _ONE_BYTE
        return b"".join(
            (_ATTRIBUTES, one[inner], _KEY, one[k], key, _VALUE, one[n + 2], _STRING_VALUE, one[n], value)
        )
    return _field(_ATTRIBUTES, _field(_KEY, key) + _field(_VALUE, _field(_STRING_VALUE, value)))


def _span(span: ReadableSpan) -> bytes:
    """``span`` as a serialised OTLP Span: what encode_spans makes of it. The ids and times are written
    as protobuf's wire format directly (fixed-size fields: a tag and the bytes); the fields that repeat
    from span to span (name, kind, flags, status, attributes) are serialised once per distinct value and
    kept (``_fixed``, ``_cache``); only the rare ones (trace state, events, links, dropped counts) still
    go through a protobuf message (bench/RESULTS.md: tracelight, and session 14)."""
    sc: Any = span.get_span_context()  # a ReadableSpan's is always set
    parent = span.parent
    parts = [_TRACE_ID, sc.trace_id.to_bytes(16, "big"), _SPAN_ID, sc.span_id.to_bytes(8, "big")]
    if parent:
        parts += (_PARENT_ID, parent.span_id.to_bytes(8, "big"))
    start, end = span.start_time, span.end_time
    if start:
        parts += (_START, start.to_bytes(8, "little"))
    if end:
        parts += (_END, end.to_bytes(8, "little"))
    events = span.events
    links = span.links
    state = sc.trace_state
    if state or events or links:
        parts.append(_rare(state, events, links))
    dropped = (span.dropped_attributes, span.dropped_events, span.dropped_links)
    if any(dropped):
        parts.append(
            _Span(
                dropped_attributes_count=dropped[0],
                dropped_events_count=dropped[1],
                dropped_links_count=dropped[2],
            ).SerializePartialToString()
        )
    remote = parent is not None and parent.is_remote
    parts.append(_fixed_part(span.name, span.kind, remote, span.status))
    attributes: Mapping[str, Any] | None = span.attributes
    if attributes:
        _attributes(parts, attributes.items())
    return b"".join(parts)


def _rare(state: Any, events: Sequence[Any], links: Sequence[Any]) -> bytes:
    """A span's trace state and events, serialised by protobuf (rare: a failed send's attempts), and its
    links in wire format (``_links``)."""
    encoded: bytes = _Span(
        trace_state=_encode_trace_state(state),
        events=_encode_events(events) if events else None,
    ).SerializePartialToString()
    return encoded + _links(links) if links else encoded


def _links(links: Sequence[Any]) -> bytes:
    """A span's ``links`` fields as the SDK's ``_encode_links`` fills them (trace and span id,
    attributes, dropped attributes, flags; not the trace state), written directly. A request of a
    batch links to each message's trace (spans.MAX_LINKS of them): through protobuf's Link and KeyValue
    objects that was most of the batch's tracing cost (bench/RESULTS.md, session 20)."""
    out: list[bytes] = []
    for link in links:
        context: Any = link.context  # a SpanContext is a tuple: read by position, not a property a field
        parts = [_TRACE_ID, context[0].to_bytes(16, "big"), _SPAN_ID, context[1].to_bytes(8, "big")]
        attributes = link.attributes
        if attributes is not None:
            for k, v in attributes.items():
                field = _attribute(k, v)  # a Span's attributes field; a Link's has another tag, same value
                if field:
                    parts += (_LINK_ATTRIBUTES, field[1:])
            # Link.dropped_attributes' rule, without its property call: only bounded attributes drop any
            # (all of them, under a limit of 0)
            if isinstance(attributes, BoundedAttributes) and attributes.dropped:
                parts += (_LINK_DROPPED, _varint(attributes.dropped))
        parts.append(_LINK_REMOTE if context[2] else _LINK_LOCAL)
        body = b"".join(parts)
        out += (_LINKS, _varint(len(body)), body)
    return b"".join(out)


def _lite_span(span: LiteSpan) -> bytes:
    """``_span`` of a LiteSpan, its fields read from its slots: no ReadableSpan property per field, no
    MappingProxy of its attributes, no dropped counts (a LiteSpan drops nothing), its status's part
    cached per name, kind and parent while the status is unset (most spans), and its preset (the first
    attributes) written as encoded once."""
    context: Any = span._context  # a SpanContext, a tuple: read by position
    trace_id, span_id, _, _, state, _ = context
    parent = span._parent
    parts = [_TRACE_ID, trace_id.to_bytes(16, "big"), _SPAN_ID, span_id.to_bytes(8, "big")]
    if parent is not None:
        parts += (_PARENT_ID, parent[1].to_bytes(8, "big"))
    start: int = span._start_time  # type: ignore[assignment]  # set by LiteSpan.__init__
    parts += (_START, start.to_bytes(8, "little"))
    end = span._end_time
    if end:
        parts += (_END, end.to_bytes(8, "little"))
    events, links = span._events, span._links
    if events or links or (state is not DEFAULT_TRACE_STATE and state):
        parts.append(_rare(state, events, links))
    remote = parent is not None and parent[2]
    status = span._status
    if status is UNSET:
        key = (span._name, id(span._kind), remote)
        fixed = _fixed_unset.get(key)
        if fixed is None:
            fixed = remember(
                _fixed_unset, key, _fixed_part(span._name, span._kind, remote, status), MAX_CACHED
            )
    else:
        fixed = _fixed_part(span._name, span._kind, remote, status)
    parts.append(fixed)
    attributes = span._attributes
    if attributes:
        items: Iterable[tuple[str, Any]] = attributes.items()
        preset = span._preset
        if preset is not None:
            parts.append(preset.encoded)
            items = islice(items, preset.leading, None)
        _attributes(parts, items)
    return b"".join(parts)


def _framed(members: list[Any]) -> list[bytes]:
    """Each of ``members`` serialised and framed as a ScopeSpans' ``spans`` field (tag, length, bytes),
    in order: FastSpans written here, in the loop (a call per span and per part is much of what they
    cost), a send one keeps (``_sent``) just before it (``_kept_send``), the usual request's two by
    ``_pair``; the others by ``_lite_span`` and ``_span``."""
    out: list[bytes] = []
    cache = _cache
    for span in members:
        if type(span) is not FastSpan:
            _frame(out, _lite_span(span) if type(span) is LiteSpan else _span(span))
            continue
        trace, state, kept = span._trace, span._state, span._sent
        if (
            kept is not None
            and span._status is UNSET
            and not (span._events or span._links or state or span._facts or span._result)
        ):  # the usual request: its receive span keeps its send, nothing rare on either
            pair = _pair(span, kept)
            if pair is not None:
                out.append(pair)
                continue
        if kept is not None:  # the request's send, ended before it: first, as it would have been queued
            _frame(out, _kept_send(span, kept))
        # ids and times around the shape's bytes (name, kind, flags, unset status, leading attributes)
        parent = span._parent
        if parent is not None:
            parts = [_ids(_TRACE_ID, trace, _SPAN_ID, span._span, _PARENT_ID, parent, _START, span._start,
                          _END, span._end)]  # fmt: skip
        else:
            parts = [_root_ids(_TRACE_ID, trace, _SPAN_ID, span._span, _START, span._start, _END, span._end)]
        if span._status is UNSET and not (span._events or span._links or state):
            parts.append(span._shape.head)
        else:
            parts += _unusual(span)
        if span._facts is not None or span._result is not None:  # a send's, from its message, result
            _sent_parts(parts, span._facts, span._result)
        attributes = span._attrs
        if attributes:  # what was set on it: the cache read inline, as _attributes does
            for k, v in attributes.items():
                kind = type(v)
                got = cache.get((k, kind, v)) if kind in _CACHEABLE else None
                parts.append(got if got is not None else _attribute(k, v))
        _frame(out, b"".join(parts))
    return out


def _frame(out: list[bytes], span: bytes) -> None:
    """``span``'s bytes appended to ``out`` as a ScopeSpans' ``spans`` field: tag, length, bytes."""
    out += (_SPANS, _varint(len(span)), span)


def _pair(span: FastSpan, kept: Sent) -> bytes | None:
    """The usual request's two spans, framed, the send first: what ``_kept_send`` (with ``_sent_parts``)
    and ``_framed`` write for them, in one ``struct`` call (``_pair_layout``; tests/app/tracing/
    test_fast.py compares the requests). ``_framed`` checked the receive span: it keeps its send
    (``kept``), nothing rare on either. None unless the rest is usual too: a message without tags or
    keys, an id whose attribute's lengths fit a byte, the receive span's one attribute (its outcome) a
    hashable scalar (encoded and cached the first time: the next request reads it)."""
    shape, send_id, start, end, facts, result = kept
    msg_id, tags, keys, size = facts
    attributes = span._attrs
    if tags or keys or msg_id is None or attributes is None or len(attributes) != 1:
        return None
    ((key, value),) = attributes.items()
    kind = type(value)
    if kind not in _CACHEABLE:
        return None
    outcome = _cache.get((key, kind, value))
    if outcome is None:
        if key in _UNIQUE:  # new every span: each would be a layout of its own
            return None
        outcome = _attribute(key, value)  # cached now: the request after this one reads it
    try:
        encoded = msg_id.encode()
    except UnicodeEncodeError:  # a lone surrogate: the general path drops the attribute
        return None
    queue = result.queue
    cached = (queue.queue_id, queue.broker_name, result.attempts)
    results = _results.get(cached) or remember(_results, cached, _result_part(result), MAX_CACHED)
    sizes = _sizes.get(size) or _size_part(size)
    parent = span._parent
    alike = (shape.head, span._shape.head, outcome, len(encoded), len(sizes), len(results), parent is None)
    layout = _pair_layouts.get(alike) or _pair_layout(alike)
    if layout is None:
        return None
    pack, send_head, before_id, receive_head, receive_tail = layout
    trace, own = span._trace, span._span
    if parent is None:
        return pack(send_head, trace, _SPAN_ID, send_id, _PARENT_ID, own, _START, start, _END, end, before_id,
                    encoded, sizes, results, receive_head, trace, _SPAN_ID, own, _START, span._start, _END,
                    span._end, receive_tail)  # fmt: skip
    return pack(send_head, trace, _SPAN_ID, send_id, _PARENT_ID, own, _START, start, _END, end, before_id,
                encoded, sizes, results, receive_head, trace, _SPAN_ID, own, _PARENT_ID, parent, _START,
                span._start, _END, span._end, receive_tail)  # fmt: skip


# What is alike in the usual request's two spans from request to request (``_pair``): the send's and
# the receive's heads, the outcome's bytes, the lengths of the message id's, the body size's and the
# result's parts, whether the receive is a root. For each: a struct of the two spans, and the bytes that
# stand between the fields that change (ids, times, the id, the size and result parts): the send's
# framing and trace id tag, its head and the id attribute's head, the receive's framing and trace id
# tag, its head and outcome. One pack writes both spans where joins and concatenations copied each part
# two or three times (bench/RESULTS.md, session 22).
_Layout = tuple[Callable[..., bytes], bytes, bytes, bytes, bytes]
_pair_layouts: dict[tuple[bytes, bytes, bytes, int, int, int, bool], _Layout] = {}
_IDS = "16s2s8s2s8scQcQ"  # trace id, span id, parent id (tags between), start and end with their tags
_ROOT_IDS = "16s2s8scQcQ"
_IDS_SIZE = struct.calcsize("<" + _IDS) + len(_TRACE_ID)  # a span's ids and times, their tags


def _pair_layout(alike: tuple[bytes, bytes, bytes, int, int, int, bool]) -> _Layout | None:
    """``_pair``'s struct and constant parts for spans ``alike``, kept; None for a message id whose
    attribute's lengths do not fit a byte (the general path writes those; nothing kept: the answer is
    one lookup in ``_ID_HEADS``)."""
    send_shape, receive_shape, outcome, id_size, size_size, result_size, root = alike
    id_head = _ID_HEADS.get(id_size)
    if id_head is None:
        return None
    before_id = send_shape + id_head
    send = _IDS_SIZE + len(before_id) + id_size + size_size + result_size
    receive_tail = receive_shape + outcome
    receive = _IDS_SIZE - (len(_PARENT_ID) + 8 if root else 0) + len(receive_tail)
    send_head = _SPANS + _varint(send) + _TRACE_ID
    receive_head = _SPANS + _varint(receive) + _TRACE_ID
    form = (f"<{len(send_head)}s{_IDS}{len(before_id)}s{id_size}s{size_size}s{result_size}s"
            f"{len(receive_head)}s{_ROOT_IDS if root else _IDS}{len(receive_tail)}s")  # fmt: skip
    layout = (struct.Struct(form).pack, send_head, before_id, receive_head, receive_tail)
    return remember(_pair_layouts, alike, layout, MAX_CACHED)


def _kept_send(receive: FastSpan, kept: Sent) -> bytes:
    """The send span a receive FastSpan keeps (FastSpan.keep_send), serialised: the receive's trace and
    trace state, the receive as its parent; its message's (facts) and result's attributes."""
    shape, send_id, start, end, facts, result = kept
    parts = [_ids(_TRACE_ID, receive._trace, _SPAN_ID, send_id, _PARENT_ID, receive._span, _START, start,
                  _END, end)]  # fmt: skip
    if receive._state:
        parts.append(_rare(receive._state, (), ()))
    parts.append(shape.head)
    _sent_parts(parts, facts, result)
    return b"".join(parts)


def _size_part(size: int) -> bytes:
    return remember(_sizes, size, _attribute(BODY_SIZE, size), MAX_CACHED)


def _sent_parts(parts: list[bytes], facts: Facts | None, result: SendResult | None) -> None:
    """``semconv.facts_attributes(facts)`` and ``result_attributes(result)`` serialised: the id written
    at once (new every message), the body's size and the result's from tables."""
    if facts is not None:
        msg_id, tags, keys, size = facts
        if msg_id is not None:
            head = _ID_HEADS.get(len(msg_id)) if msg_id.isascii() else None
            if head is not None:  # the usual: an ASCII id, every length one byte
                parts += (head, msg_id.encode())
            else:
                parts.append(_attribute(MESSAGE_ID, msg_id))
        if tags or keys:
            _attributes(parts, tags_and_keys(tags, keys, {}).items())
        parts.append(_sizes.get(size) or _size_part(size))
    if result is not None:  # encoded once per queue, broker and attempts
        queue = result.queue
        key = (queue.queue_id, queue.broker_name, result.attempts)
        parts.append(_results.get(key) or remember(_results, key, _result_part(result), MAX_CACHED))


def _result_part(result: SendResult) -> bytes:
    return attributes_bytes(result_attributes(result))


def _unusual(span: FastSpan) -> list[bytes]:
    """A FastSpan's trace state, events and links, and its status's part with its shape's leading
    attributes (what its shape's head holds for an unset status)."""
    shape = span._shape
    parts = [_fixed_part(shape.name, shape.kind, shape.remote, span._status), shape.attributes]
    if span._events or span._links or span._state:
        parts.insert(0, _rare(span._state, span._events or (), span._links or ()))
    return parts


def shape_bytes(name: str, kind: Any, remote: bool, leading: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """A FastSpan shape's encodings (app.tracing.fast.Shape): its name, kind, flags and unset status
    followed by ``leading``, and ``leading`` alone."""
    attributes = attributes_bytes(leading)
    return _fixed_part(name, kind, remote, UNSET) + attributes, attributes


def _attributes(parts: list[bytes], items: Iterable[tuple[str, Any]]) -> None:
    """Each attribute's serialised field appended to ``parts``: the cache read inline (a call per
    attribute was a third of its cost), ``_attribute`` on a miss."""
    get = _cache.get
    for k, v in items:
        kind = type(v)
        got = get((k, kind, v)) if kind in _CACHEABLE else None
        parts.append(got if got is not None else _attribute(k, v))


def _fixed_part(name: str, kind: Any, remote: bool, status: Status) -> bytes:
    """A span's name, kind, flags and status serialised (cached by the callers)."""
    key = (name, id(kind), remote, status.status_code, status.description)
    fixed = _fixed.get(key)
    if fixed is None:
        fixed = _Span(
            name=name, kind=_KINDS[id(kind)], flags=_REMOTE if remote else _LOCAL
        ).SerializePartialToString()
        fixed = remember(_fixed, key, fixed + _status(status), MAX_CACHED)
    return fixed


def preset(attributes: Mapping[str, Any]) -> Preset:
    """``attributes`` encoded once, for LiteSpans whose attributes start with exactly these."""
    return Preset(attributes_bytes(attributes), len(attributes), frozenset(attributes))


def attributes_bytes(attributes: Mapping[str, Any]) -> bytes:
    """``attributes`` as a Span's ``attributes`` fields, serialised (what ``_span`` writes for them)."""
    return b"".join(_attribute(k, v) for k, v in attributes.items())


def _status(status: Status) -> bytes:
    """``status`` serialised as a Span's ``status`` field (one per code and description, cached)."""
    cached = (status.status_code, status.description)
    got = _statuses.get(cached)
    if got is None:
        encoded = _Span(status=_encode_status(status)).SerializePartialToString()
        got = remember(_statuses, cached, encoded, MAX_CACHED)
    return got


def encode_bytes(spans: Sequence[ReadableSpan | FastSpan]) -> bytes:
    """The serialised OTLP request of ``spans``, grouped by resource then instrumentation scope (as
    encode_spans), written as protobuf's wire format: each span's bytes framed as a ScopeSpans' ``spans``
    field, each scope's as a ResourceSpans' ``scope_spans``, each resource's as the request's
    ``resource_spans``. No protobuf message per span is built, parsed or copied (what parsing each span
    into the request and serialising that cost: bench/RESULTS.md, session 14)."""
    grouped: dict[Any, dict[Any, list[Any]]] = {}
    for resource, scope, members in _by_identity(spans):  # then by equality, a hash per group
        grouped.setdefault(resource, {}).setdefault(scope or None, []).extend(members)
    request: list[bytes] = []
    for resource, scopes in grouped.items():
        resource_spans = [_field(_RESOURCE, _encode_resource(resource).SerializePartialToString())]
        for scope, members in scopes.items():
            scope_spans = [_field(_SCOPE, _encode_instrumentation_scope(scope).SerializePartialToString())]
            scope_spans += _framed(members)
            if scope is not None and scope.schema_url:
                scope_spans.append(_field(_SCHEMA_URL, scope.schema_url.encode()))
            resource_spans.append(_field(_SCOPE_SPANS, b"".join(scope_spans)))
        if resource.schema_url:
            resource_spans.append(_field(_SCHEMA_URL, resource.schema_url.encode()))
        request.append(_field(_RESOURCE_SPANS, b"".join(resource_spans)))
    return b"".join(request)


def _by_identity(spans: Sequence[ReadableSpan | FastSpan]) -> list[tuple[Any, Any, list[Any]]]:
    """``spans`` grouped by their resource and scope objects' identities, in order of first appearance:
    a tracer's spans share both objects, and hashing a scope is a Python call per span."""
    groups: dict[tuple[int, int], tuple[Any, Any, list[Any]]] = {}
    span: Any
    last: tuple[Any, Any] = (None, None)  # the last span's resource and scope: most often the next's
    last_shape = None  # the last FastSpan's shape (its resource and scope: ``last``), most often the next's
    members: list[Any] = []
    for span in spans:
        kind = type(span)
        if kind is FastSpan:
            shape = span._shape
            if shape is last_shape:
                members.append(span)
                continue
            resource, scope = shape.resource, shape.scope
            if resource is last[0] and scope is last[1]:
                members.append(span)
                last_shape = shape
                continue
        elif kind is LiteSpan:
            resource, scope = span._resource, span._instrumentation_scope
        else:
            resource, scope = span.resource, span.instrumentation_scope
        if resource is last[0] and scope is last[1]:
            members.append(span)
            continue
        key = (id(resource), id(scope))
        group = groups.get(key)
        if group is None:
            group = groups[key] = (resource, scope, [])
        members = group[2]
        members.append(span)
        last = (resource, scope)
        last_shape = span._shape if kind is FastSpan else None
    return list(groups.values())


def encode(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """The OTLP request of ``spans`` as a message (the gRPC exporter's stub wants one)."""
    request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(encode_bytes(spans))
    return request


def _varint(n: int) -> bytes:
    """``n`` (>= 0) as a protobuf varint."""
    if n < 0x80:
        return _ONE_BYTE[n]
    if n < 0x4000:  # a span's length, most often: two bytes
        return _TWO_BYTES[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, value: bytes) -> bytes:
    """A length-delimited field: its tag, the length, the bytes."""
    return tag + _varint(len(value)) + value


def exporter(protocol: str) -> SpanExporter:
    """The OTLP span exporter of ``protocol`` (``OTEL_EXPORTER_OTLP_PROTOCOL``, as app.tracing.loop_export
    checked it: ``http/protobuf`` or ``grpc``), configured by the ``OTEL_*`` variables, encoding with
    ``encode``. Raises ValueError for another protocol rather than taking it for gRPC."""
    if protocol == "http/protobuf":
        return _http()
    if protocol != "grpc":
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL must be grpc or http/protobuf, not {protocol[:40]!r}")
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
                    data = encode_bytes(spans)
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
