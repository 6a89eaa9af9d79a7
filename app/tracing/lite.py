"""Spans of the OpenTelemetry SDK at a fraction of the SDK's own cost per span (issue 31's budget).

The SDK's ``Tracer.start_span`` + ``Span.end`` cost ~8x what the span's data does (measured by
bench.tracing_cpu: a lock per span and per attribute call, ``BoundedAttributes`` checking and copying
each attribute, span limits, a self-metrics hook), and the OTLP encoder hashes the span's ``Resource``
through ``json.dumps`` once per span. The sidecar's spans are few, short and made by its own code, with
attributes of the types OpenTelemetry allows, so a ``LiteTracer`` keeps what matters of the SDK and
drops the rest:

- the SDK's sampler, id generator, resource, instrumentation scope and span processors, taken from the
  SDK tracer (so ``OTEL_TRACES_SAMPLER``, ``OTEL_SERVICE_NAME``, ... apply as before); an unsampled span
  is a ``NonRecordingSpan`` that costs one sampler call;
- where the SDK's own samplers' answer follows from their fields, they are not asked (``Decisions``): a
  ``TraceIdRatioBased`` samples a trace id below its bound, a ``StaticSampler`` always or never, and a
  ``ParentBased`` (the default, every ``parentbased_*``) hands each parent case to one of those; asking
  builds a ``SamplingResult`` and reads the parent again, ~a third of a LiteSpan's cost, and is the whole
  cost of a span the sampler drops;
- a ``LiteSpan`` is a plain object with a dict of attributes, and its own ``ReadableSpan``; its
  ``end()`` hands itself to the processors (what ``_Span.end`` does, without the lock: a span is only
  touched by the task that made it), which the batching processor queues for its export thread.

Spans from other code (the SDK tracer itself) keep working beside these: both feed the same processors.
The processors' ``on_start`` is not called (the sidecar's one processor, the batching one, does nothing
there), and no span limits apply: the sidecar's spans carry at most a dozen attributes, a few events (a
failed call's attempts, bounded by the producer's retries) and at most spans.MAX_LINKS links.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, StaticSampler, TraceIdRatioBased
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.types import AttributeValue

UNSET = Status(StatusCode.UNSET)  # a new span's status (app.tracing.otlp reads it by identity)
# W3C trace context level 2's random-trace-id flag, set as the SDK sets it (APIs before 1.39 lack it)
_RANDOM: int = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)


class _Resource(Resource):
    """The tracer's resource with its hash computed once: the OTLP encoder groups spans by resource, and
    ``Resource.__hash__`` serialises the attributes as JSON at every call (once per exported span)."""

    def __init__(self, resource: Resource) -> None:
        super().__init__(dict(resource.attributes), resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or super().__eq__(other)


_LIMIT: int = TraceIdRatioBased.TRACE_ID_LIMIT  # the ratio sampler reads the low 64 bits of a trace id
_ALL = _LIMIT + 1  # a bound no trace id reaches: always sampled
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | _RANDOM)
_DEFAULT = TraceFlags(TraceFlags.DEFAULT)
ROOT, REMOTE_SAMPLED, REMOTE_NOT_SAMPLED, LOCAL_SAMPLED, LOCAL_NOT_SAMPLED = range(5)  # parent cases


def _bound(sampler: Sampler) -> int | None:
    """The bound ``b`` such that ``sampler`` samples exactly the trace ids with ``id & 2**64-1 < b``,
    whatever the parent, with the attributes given and the parent's trace state: TraceIdRatioBased's
    rule, its ``bound``; a StaticSampler's 0 (off) or 2**64 (on). None for any other sampler (a subclass
    that decides otherwise, RECORD_ONLY, someone else's): it is asked."""
    if isinstance(sampler, TraceIdRatioBased):
        kind = type(sampler)
        known = (
            kind.should_sample is TraceIdRatioBased.should_sample and kind.bound is TraceIdRatioBased.bound
        )
        return sampler.bound if known and sampler.TRACE_ID_LIMIT == _LIMIT else None
    if isinstance(sampler, StaticSampler) and type(sampler).should_sample is StaticSampler.should_sample:
        decision = sampler._decision
        return _ALL if decision is Decision.RECORD_AND_SAMPLE else 0 if decision is Decision.DROP else None
    return None


def decisions(sampler: Sampler) -> tuple[int | None, ...]:
    """``sampler``'s decision per parent case (ROOT, REMOTE_SAMPLED, ... LOCAL_NOT_SAMPLED) as a bound
    (see ``_bound``), or None where it must be asked. A ParentBased (not overriding should_sample) hands
    each case to its delegate, which is known when it is a ratio or static sampler (not a nested
    ParentBased); a ratio or static sampler answers every case alike."""
    own = _bound(sampler)
    if own is not None:
        return (own,) * 5
    if isinstance(sampler, ParentBased) and type(sampler).should_sample is ParentBased.should_sample:
        cases = (sampler._root, sampler._remote_parent_sampled, sampler._remote_parent_not_sampled,
                 sampler._local_parent_sampled, sampler._local_parent_not_sampled)  # fmt: skip
        return tuple(_bound(s) for s in cases)
    return (None,) * 5


def follows_sampled_parents(sampler: Sampler) -> bool:
    """Whether a span under a sampled parent is always sampled by ``sampler`` (the default, every
    ``parentbased_*``, always_on), read from its fields."""
    known = decisions(sampler)
    return known[REMOTE_SAMPLED] == _ALL and known[LOCAL_SAMPLED] == _ALL


def _valid_context(fields: tuple[int, int, bool, TraceFlags, TraceState, bool]) -> SpanContext:
    """A SpanContext of fields known valid, made as the tuple it is (``SpanContext.__new__`` checks the
    ids' ranges again, in Python); tests/app/tracing/test_lite.py names the layout."""
    return tuple.__new__(SpanContext, fields)


class Preset(NamedTuple):
    """The OTLP encoding of a span's first ``leading`` attributes, made once for every span that starts
    with the same ones (the sidecar's spans start with the semantic conventions' four per operation and
    topic): app.tracing.otlp writes ``encoded`` for them instead of looking each one up, per span. A
    span whose preset attribute is set again drops its preset."""

    encoded: bytes
    leading: int
    keys: frozenset[str]


class LiteSpan(trace.Span, ReadableSpan):
    """A recording span of a ``LiteTracer``; ended once, by the code that started it. It is its own
    ``ReadableSpan`` (as the SDK's span is): ``end`` hands itself to the processors, no copy built."""

    __slots__ = ("_attributes", "_context", "_end_time", "_ended", "_events", "_instrumentation_info",
                 "_instrumentation_scope", "_kind", "_links", "_name", "_parent", "_preset", "_resource",
                 "_start_time", "_status", "_tracer")  # fmt: skip

    def __init__(
        self,
        tracer: LiteTracer,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, AttributeValue],
        links: Sequence[Link],
        start_time: int | None = None,
        preset: Preset | None = None,
    ) -> None:
        self._tracer = tracer
        self._preset = preset
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = attributes
        self._links = links
        self._events: list[Event] = []
        self._status = UNSET
        self._start_time = start_time or time.time_ns()
        self._end_time: int | None = None
        self._resource = tracer.resource
        self._instrumentation_scope = tracer.scope
        self._instrumentation_info = None
        self._ended = False

    def get_span_context(self) -> SpanContext:
        return self._context  # type: ignore[return-value]  # always set (ReadableSpan's type allows None)

    # No span limits apply (see the module's doc), so nothing is dropped: ReadableSpan's own answers
    # are an isinstance of an ABC each, read per exported span by the OTLP encoder.
    @property
    def dropped_attributes(self) -> int:
        return 0

    @property
    def dropped_events(self) -> int:
        return 0

    @property
    def dropped_links(self) -> int:
        return 0

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        if not self._ended:
            # our own dict (see __init__); no cast(): its subscripted type is built at every call
            self._attributes[key] = value  # type: ignore[index]
            if self._preset is not None and key in self._preset.keys:
                self._preset = None  # a preset value changed: its encoding no longer stands for it

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self._ended:
            self._attributes.update(attributes)  # type: ignore[union-attr]
            if self._preset is not None and not self._preset.keys.isdisjoint(attributes):
                self._preset = None

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        if not self._ended:
            self._events.append(Event(name, attributes, timestamp or time.time_ns()))

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        if not self._ended and context.is_valid:
            self._links = [*self._links, Link(context, attributes)]

    def update_name(self, name: str) -> None:
        if not self._ended:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """OK is final (the SDK's rule). app.tracing.fast's FastSpan shares this method and
        ``record_exception``: hence is_recording, not this class's fields."""
        if not self.is_recording() or self._status.status_code is StatusCode.OK:
            return
        self._status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        kind = type(exception)
        module = kind.__module__
        attrs: dict[str, Any] = {
            "exception.type": f"{module}.{kind.__qualname__}" if module != "builtins" else kind.__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self._end_time = end_time or time.time_ns()
        self._tracer.processor.on_end(self)


class LiteTracer(trace.Tracer):
    """``start_span`` of an SDK tracer's configuration, making ``LiteSpan``s (see the module's doc). A
    ``dict`` of attributes given to ``start_span`` becomes the span's own (callers build a fresh one)."""

    is_lite = True  # app.tracing.spans takes its ``child`` shortcut with this tracer

    def __init__(self, sdk: SdkTracer) -> None:
        self.sampler = sdk.sampler
        self.ids = sdk.id_generator
        self._span_id = sdk.id_generator.generate_span_id  # bound once: a span's id per child
        self.resource = _Resource(sdk.resource)
        self.processor = sdk.span_processor
        self.scope = sdk._instrumentation_scope  # what the SDK's own spans carry: the same scope
        self.decisions = decisions(sdk.sampler)
        # a root's flags, sampled or not (the random-trace-id bit is the id generator's, asked once)
        random = _RANDOM if _RANDOM and self.ids.is_trace_id_random() else 0
        self._root_sampled = TraceFlags(TraceFlags.SAMPLED | random)
        self._root_unsampled = f"{TraceFlags.DEFAULT | random:02x}"

    @property
    def knows_roots(self) -> bool:
        """Whether the sampler's answer for a root span is known from its fields (see ``decisions``)."""
        return self.decisions[ROOT] is not None

    def dropped_root(self, trace_id: int) -> str | None:
        """The traceparent of the root span ``start_span`` would drop for ``trace_id`` (a span id drawn
        as it would), or None when it would sample it (then: ``start_root``). Only if ``knows_roots``:
        the sample-free path of app.tracing.spans, without a span object for what is dropped."""
        bound = self.decisions[ROOT]
        assert bound is not None
        if trace_id & _LIMIT < bound:
            return None
        return f"00-{trace_id:032x}-{self.ids.generate_span_id():016x}-{self._root_unsampled}"

    def start_root(
        self,
        name: str,
        trace_id: int,
        kind: SpanKind,
        attributes: dict[str, Any],
        preset: Preset | None = None,
    ) -> LiteSpan:
        """The root span ``start_span`` makes for ``trace_id`` when its sampler samples it (``dropped_root``
        said None); ``attributes`` become the span's own; ``preset``, if given, encodes their first ones."""
        own = SpanContext(trace_id, self.ids.generate_span_id(), False, self._root_sampled)
        return LiteSpan(self, name, own, None, kind, attributes, (), None, preset)

    def child(
        self,
        name: str,
        parent: SpanContext,
        kind: SpanKind,
        attributes: dict[str, Any],
        preset: Preset | None = None,
    ) -> LiteSpan | None:
        """The span ``start_span`` makes under the valid ``parent`` when its sampler's answer for that
        parent's case is known from its fields and is to sample; else None (then ``start_span``, which
        asks the sampler or makes the unsampled span). Without the current-context reads and the
        Context object ``start_span`` goes through: the sidecar's receive and send spans know their
        parent (spans.opened, spans._send_span). ``attributes`` become the span's own; ``preset``, if
        given, encodes their first ones (see Preset)."""
        context: Any = parent  # a SpanContext is a tuple: read by position, not a property per field
        trace_id, _, remote, parent_flags, state, _ = context
        bound = self.decisions[(REMOTE_SAMPLED if remote else LOCAL_SAMPLED) + (not parent_flags & 1)]
        if bound is None or trace_id & _LIMIT >= bound:
            return None
        flags = _SAMPLED_RANDOM if _RANDOM and parent_flags & _RANDOM else _SAMPLED
        # a valid parent's trace id and a new span id (never 0): valid, without SpanContext's checks
        own = _valid_context((trace_id, self._span_id(), False, flags, state, True))
        return LiteSpan(self, name, own, parent, kind, attributes, (), None, preset)

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        links = links or ()
        parent: SpanContext | None = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self.ids.generate_trace_id()
            bound = self.decisions[ROOT]
        else:
            trace_id = parent.trace_id
            case = (REMOTE_SAMPLED if parent.is_remote else LOCAL_SAMPLED) + (not parent.trace_flags & 1)
            bound = self.decisions[case]
        if bound is None:  # the sampler's answer is not known from its fields: ask it
            return self._asked(name, context, parent, trace_id, kind, attributes, links, start_time)
        sampled = trace_id & _LIMIT < bound
        flags = _SAMPLED if sampled else _DEFAULT
        if _RANDOM and (self.ids.is_trace_id_random() if parent is None else parent.trace_flags & _RANDOM):
            flags = TraceFlags(flags | _RANDOM)
        own = SpanContext(trace_id, self.ids.generate_span_id(), False, flags,
                          None if parent is None else parent.trace_state)  # fmt: skip
        if not sampled:
            return NonRecordingSpan(own)
        attrs = attributes if type(attributes) is dict else dict(attributes or {})
        return LiteSpan(self, name, own, parent, kind, attrs, links, start_time)

    def _asked(
        self,
        name: str,
        context: Context | None,
        parent: SpanContext | None,
        trace_id: int,
        kind: SpanKind,
        attributes: Any,
        links: Sequence[Link],
        start_time: int | None,
    ) -> trace.Span:
        sampled = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
        decision = sampled.decision
        flags = TraceFlags.SAMPLED if decision is Decision.RECORD_AND_SAMPLE else TraceFlags.DEFAULT
        if _RANDOM and (self.ids.is_trace_id_random() if parent is None else parent.trace_flags & _RANDOM):
            flags |= _RANDOM
        own = SpanContext(
            trace_id, self.ids.generate_span_id(), False, TraceFlags(flags), sampled.trace_state
        )
        if decision is Decision.DROP:
            return NonRecordingSpan(own)
        # the sampler's attributes are the span's (as in the SDK): ours, passed through, or its own
        return LiteSpan(self, name, own, parent, kind, dict(sampled.attributes), links, start_time)

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]  # the API's is a decorated generator too
        self, name: str, *args: Any, end_on_exit: bool = True, **kwargs: Any
    ) -> Iterator[trace.Span]:
        """``start_span``'s span, current inside the ``with`` (exceptions recorded, as ``start_span``'s
        ``record_exception``/``set_status_on_exception`` say), ended after it unless ``end_on_exit``."""
        record = kwargs.get("record_exception", True)
        status = kwargs.get("set_status_on_exception", True)
        with trace.use_span(self.start_span(name, *args, **kwargs), end_on_exit, record, status) as span:
            yield span
