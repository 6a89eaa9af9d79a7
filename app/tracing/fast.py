"""A sampled request's own two spans recorded as bench.tracing_floor records them (issue 31's budget).

A ``LiteSpan`` is already a fraction of the SDK's span, but it is still an SDK ``ReadableSpan``: a
SpanContext, a dict of attributes led by the semantic conventions' four, a processor that reads its
flags back, an encoder that reads every field back and looks up what each means. When the spans' one
processor is the event loop's (app.tracing.loop_export), nothing but that processor ever reads them, so
the request's ``receive`` and ``send`` spans can be what the floor keeps: ids and times as integers, and
a ``Shape`` per (name, kind, parent's remoteness) that holds everything else those spans of a topic
share (name, kind, flags, the unset status and the leading attributes) encoded once. The OTLP encoder
(app.tracing.otlp) writes a ``FastSpan`` as a few fixed-size fields around its shape's bytes.

A ``FastSpan`` is a full ``trace.Span`` (attributes, events, status, exceptions, renaming, its
SpanContext on request), so code that handles spans keeps working; the sidecar's own hooks
(app.tracing.spans) read its fields directly where that saves a SpanContext. Everything else keeps the
LiteSpan: other processors (the tests' in-memory exporter, the SDK's batching one when the settings need
it), another id generator, a sampler whose answer is not known from its fields, and every other span.
tests/app/tracing/test_fast.py checks that both give the same OTLP request, span by span.
"""

from __future__ import annotations

import random
import time
from binascii import unhexlify as _unhexlify
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState

from rocksidecar.rmq import Message, SendResult

from .lite import (
    _LIMIT,
    _RANDOM,
    LOCAL_SAMPLED,
    REMOTE_NOT_SAMPLED,
    REMOTE_SAMPLED,
    UNSET,
    LiteSpan,
    LiteTracer,
)
from .semconv import MESSAGE_KEYS, RESULT_KEYS, Facts, facts_attributes, result_attributes
from .semconv import facts as message_facts
from .tracestate import trace_state

_TRACE_FLAGS = [TraceFlags(n) for n in range(256)]
_DASH_FLAGS = [f"-{n:02x}" for n in range(256)]  # a traceparent's last field, after its dash
_LOW_BITS = {f"{n:x}": n & 3 for n in range(16)}  # a checked traceparent's last digit: sampled, random
_getrandbits = random.getrandbits  # what RandomIdGenerator draws ids with
_time_ns = time.time_ns  # a global, not a module's attribute, read twice a span
_TYPED = MESSAGE_KEYS | RESULT_KEYS  # attributes a send span's message and result give
_ROOT_FLAGS = 1 | _RANDOM  # sampled; RandomIdGenerator's trace ids are random, and a root says so


class Shape(NamedTuple):
    """What every span of one name, kind and parent's remoteness shares: ``head`` is its name, kind,
    flags and unset status, then its leading attributes, all serialised (app.tracing.otlp.shape)."""

    name: str
    kind: SpanKind
    remote: bool
    leading: Mapping[str, Any]
    head: bytes  # the name/kind/flags/status part, then ``attributes``: what otlp writes for an unset status
    attributes: bytes  # the leading attributes alone (written after another status's part)
    resource: Resource
    scope: Any


# A send kept by its receive span (FastSpan.keep_send): shape, span id, start, end, its message's facts,
# result
Sent = tuple[Shape, bytes, int, int, Facts, SendResult]


class FastSpan(trace.Span):
    """A recording span of a ``Recorder`` (see the module's doc); ended once, by the code that started
    it, on the processor's loop. A request's send span keeps its message and result as they are
    (``_facts``: semconv.facts, never the body; ``_result``): the encoder writes their attributes from them,
    with no dict of them built per span.

    A request's receive span also keeps the send that succeeded under it (``_sent``: ``keep_send``):
    one object and one queued entry for the request's two spans, the send written before it by the
    encoder. A send that failed, or one the receive span cannot keep, is a FastSpan of its own."""

    __slots__ = ("_attrs", "_end", "_events", "_facts", "_flags", "_links", "_parent", "_recorder",
                 "_result", "_sent", "_shape", "_span", "_start", "_state", "_status", "_trace",
                 "_trace_hex")  # fmt: skip
    _result: SendResult | None
    _attrs: dict[str, Any] | None
    _events: list[Event] | None
    _links: list[Link] | None
    _sent: Sent | None

    def __init__(
        self,
        recorder: Recorder,
        shape: Shape,
        trace: bytes,
        trace_hex: str,
        span: bytes,
        parent: bytes | None,
        flags: int,
        state: TraceState | None,
        facts: Facts | None = None,
        start: int = 0,
    ) -> None:
        self._recorder = recorder
        self._shape = shape
        # the ids as the encoder and the traceparent want them: bytes (big-endian) and the trace's hex;
        # no parent: a root
        self._trace, self._trace_hex, self._span, self._parent = trace, trace_hex, span, parent
        self._flags = flags
        self._state = state
        self._facts = facts
        self._result = self._attrs = self._events = self._links = self._sent = None  # set later, if ever
        self._status = UNSET
        self._start = start or _time_ns()
        self._end = 0  # not ended

    def traceparent(self) -> str:
        """The W3C traceparent of this span (what a message it carries on holds): of strings, since an
        f-string's integer formats cost 4x as much."""
        return f"00-{self._trace_hex}-{self._span.hex()}{_DASH_FLAGS[self._flags]}"

    def get_span_context(self) -> SpanContext:
        fields = (int.from_bytes(self._trace, "big"), int.from_bytes(self._span, "big"), False,
                  _TRACE_FLAGS[self._flags], self._state, True)  # fmt: skip
        context: SpanContext = tuple.__new__(SpanContext, fields)  # valid by construction (lite's rule)
        return context

    def child(self, shape: Shape, facts: Facts | None = None, start: int = 0) -> FastSpan | None:
        """A sampled child of this span with ``shape`` (local parent), a send of a message with ``facts``,
        started at ``start`` (0: now), when the sampler's answer is known to be yes; else None (the
        caller asks the tracer)."""
        if not self.samples_children():
            return None
        return FastSpan(self._recorder, shape, self._trace, self._trace_hex, _span_id(), self._span,
                        self._flags, self._state, facts, start)  # fmt: skip

    def samples_children(self) -> bool:
        """Whether the sampler samples a child of this span (its id not drawn yet)."""
        bound = self._recorder.local_sampled
        return bound > _LIMIT or not _dropped(self._trace, bound)

    def keep_send(self, shape: Shape, start: int, msg: Message, result: SendResult) -> bool:
        """Keep the send span (its id drawn now; started at ``start``, ended now) of ``msg`` (its facts:
        semconv.facts, never the body) and its ``result``, when this span is still recording and keeps
        none yet; else False (the caller makes it a child span). The caller asked
        ``samples_children``; no id is drawn between that and this (a send draws none), so the ids
        come in the order a child span made at the send's start would have drawn them."""
        if self._end or self._sent is not None:
            return False
        self._sent = (shape, _span_id(), start, _time_ns(), message_facts(msg), result)
        return True

    def sent(self, result: SendResult) -> None:
        """The send this span is of went out: ``result``'s attributes are the span's."""
        if self._end:
            return
        if self._result is None and (self._attrs is None or RESULT_KEYS.isdisjoint(self._attrs)):
            self._result = result
        else:  # a second result, or its attributes set already: set as values, replacing theirs
            self.set_attributes(result_attributes(result))

    def is_recording(self) -> bool:
        return not self._end

    def set_attribute(self, key: str, value: Any) -> None:
        if not self._end:
            if key in _TYPED and (self._facts is not None or self._result is not None):
                self._untyped()
            if self._attrs is None:
                self._attrs = {}
            self._attrs[key] = value
            if key in self._shape.leading:
                self._reshape()

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self._end:
            if (self._facts is not None or self._result is not None) and not _TYPED.isdisjoint(attributes):
                self._untyped()
            if self._attrs is None:
                self._attrs = dict(attributes)
            else:
                self._attrs.update(attributes)
            if not self._shape.leading.keys().isdisjoint(attributes):
                self._reshape()

    def _untyped(self) -> None:
        """The message's and the result's attributes as set values (first, in the order the encoder
        writes them), so that a value set again replaces them rather than repeating the key."""
        typed: dict[str, Any] = {}
        if self._facts is not None:
            facts_attributes(self._facts, typed)
        if self._result is not None:
            typed.update(result_attributes(self._result))
        self._attrs = {**typed, **(self._attrs or {})}
        self._facts = self._result = None

    def _reshape(self) -> None:
        """A leading attribute set again: the shape keeps none, its values go with the span's own
        (first, so that the value set later wins)."""
        self._untyped()
        shape = self._shape
        self._attrs = {**shape.leading, **(self._attrs or {})}
        self._shape = self._recorder.shape(shape.name, shape.kind, shape.remote, {})

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if not self._end:
            if self._events is None:
                self._events = []
            self._events.append(Event(name, attributes, timestamp or time.time_ns()))

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        if not self._end and context.is_valid:
            self._links = [*(self._links or ()), Link(context, attributes)]

    def update_name(self, name: str) -> None:
        if not self._end:
            shape = self._shape
            self._shape = self._recorder.shape(name, shape.kind, shape.remote, shape.leading)

    # a LiteSpan's: its status rule (OK is final) and its exception event, through is_recording and add_event
    set_status = LiteSpan.set_status
    record_exception = LiteSpan.record_exception

    def end(self, end_time: int | None = None) -> None:
        if self._end:
            return
        self._end = end_time or _time_ns()
        self._recorder.on_end(self)


def _span_id() -> bytes:
    """A span id as RandomIdGenerator draws it (never 0, the invalid id), as bytes."""
    return (_getrandbits(64) or _nonzero()).to_bytes(8, "big")


def _nonzero() -> int:
    """Drawn again while 0 (RandomIdGenerator's loop; 0 comes once in 2**64 draws)."""
    got = 0
    while not got:
        got = _getrandbits(64)
    return got


def _dropped(trace: bytes, bound: int) -> bool:
    """Whether a sampler whose bound is ``bound`` (lite.decisions) drops ``trace``: its low 64 bits at
    or above it (the ratio sampler's rule). Asked only for a bound of at most _LIMIT: a larger one
    samples every id, which the callers tell without the call."""
    return int.from_bytes(trace[8:], "big") >= bound


class Recorder:
    """FastSpans of a LiteTracer whose one processor is the loop's (``of`` says when), handed to that
    processor at their end. ``encode_shape`` is app.tracing.otlp's (passed in: otlp imports this
    module to encode its spans)."""

    def __init__(
        self,
        tracer: LiteTracer,
        on_end: Callable[[FastSpan], None],
        encode_shape: Callable[[str, SpanKind, bool, Mapping[str, Any]], tuple[bytes, bytes]],
    ) -> None:
        self.on_end = on_end
        self._resource = tracer.resource
        self._scope = tracer.scope
        self._encode_shape = encode_shape
        known = tracer.decisions
        assert None not in (known[REMOTE_SAMPLED], known[REMOTE_NOT_SAMPLED], known[LOCAL_SAMPLED])
        self.remote_bounds: tuple[int, int] = (known[REMOTE_NOT_SAMPLED], known[REMOTE_SAMPLED])  # type: ignore[assignment]
        self.local_sampled: int = known[LOCAL_SAMPLED]  # type: ignore[assignment]

    @classmethod
    def of(cls, tracer: trace.Tracer, encode_shape: Any) -> Recorder | None:
        """A Recorder for ``tracer`` when it is a LiteTracer with RandomIdGenerator's ids, a sampler
        whose answers for a remote parent and a sampled local parent are known from its fields,
        and one processor, one that takes FastSpans (``on_end_sampled``: the loop's, app.tracing
        .loop_export, which this module does not import: it imports the encoder, which imports this);
        else None (LiteSpans, as before)."""
        if not isinstance(tracer, LiteTracer) or type(tracer.ids) is not RandomIdGenerator:
            return None
        known = tracer.decisions
        if None in (known[REMOTE_SAMPLED], known[REMOTE_NOT_SAMPLED], known[LOCAL_SAMPLED]):
            return None
        processor = tracer.processor
        members = getattr(processor, "_span_processors", (processor,))  # the SDK's multi processor's
        on_end = getattr(members[0], "on_end_sampled", None) if len(members) == 1 else None
        if on_end is None:  # not a processor that takes FastSpans (loop_export.LoopBatchProcessor does)
            return None
        return cls(tracer, on_end, encode_shape)

    def shape(self, name: str, kind: SpanKind, remote: bool, leading: Mapping[str, Any]) -> Shape:
        """The shape of spans named ``name`` of ``kind`` whose first attributes are ``leading`` (the
        caller keeps it: app.tracing.spans per operation and topic)."""
        head, attributes = self._encode_shape(name, kind, remote, leading)
        return Shape(name, kind, remote, dict(leading), head, attributes, self._resource, self._scope)

    def root(self, shape: Shape, trace_id: int) -> FastSpan:
        """The root span with ``shape`` for ``trace_id``, which the sampler samples (the caller asked
        LiteTracer.dropped_root)."""
        trace = trace_id.to_bytes(16, "big")
        return FastSpan(self, shape, trace, trace.hex(), _span_id(), None, _ROOT_FLAGS, None)

    def remote_child(self, shape: Shape, traceparent: str, tracestate: str | None) -> FastSpan | None:
        """The span with ``shape`` under a request's ``traceparent`` (checked: lower-case hex) when the
        sampler samples it, else None."""
        low = _LOW_BITS[traceparent[54]]  # the flags' sampled and random bits: their last hex digit's
        trace_hex = traceparent[3:35]
        trace = _unhexlify(trace_hex)  # half of bytes.fromhex's cost
        bound = self.remote_bounds[low & 1]
        if bound <= _LIMIT and _dropped(trace, bound):  # the bound read here: most sample every parent
            return None
        state = trace_state(tracestate) if tracestate else None  # kept per string; logs nothing
        parent = _unhexlify(traceparent[36:52])
        return FastSpan(self, shape, trace, trace_hex, _span_id(), parent, 1 | (low & _RANDOM), state)
