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
- under a sampled parent, a ParentBased sampler whose sampled-parent cases are always on (the default)
  is not asked each time: its answer is known (``follows_sampled_parents``);
- a ``LiteSpan`` is a plain object with a dict of attributes; its ``end()`` hands one ``ReadableSpan``
  to the processors (what ``_Span.end`` does, without the lock: a span is only touched by the task that
  made it), which the batching processor queues for its export thread.

Spans from other code (the SDK tracer itself) keep working beside these: both feed the same processors.
The processors' ``on_start`` is not called (the sidecar's one processor, the batching one, does nothing
there), and no span limits apply: the sidecar's spans carry at most a dozen attributes, a few events (a
failed call's attempts, bounded by the producer's retries) and at most spans.MAX_LINKS links.
"""

from __future__ import annotations

import contextlib
import re
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.types import AttributeValue

_UNSET = Status(StatusCode.UNSET)
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


# the end of a ParentBased description: anchored, so that a nested sampler's own cases cannot match
_SAMPLED_PARENTS_ON = re.compile(
    r",remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:[^,{}]*"
    r",localParentSampled:AlwaysOnSampler,localParentNotSampled:[^,{}]*\}$"
)


def follows_sampled_parents(sampler: Sampler) -> bool:
    """Whether ``sampler`` is the SDK's ParentBased with both sampled-parent cases always on (the
    default, and every ``parentbased_*`` of OTEL_TRACES_SAMPLER): then a span under a sampled parent is
    sampled, with the parent's trace state and the attributes given, and asking costs ~a third of a
    LiteSpan (bench.tracing_cpu). Read from its description, which names each case's sampler."""
    if not isinstance(sampler, ParentBased) or type(sampler).should_sample is not ParentBased.should_sample:
        return False
    described: str = sampler.get_description()  # type: ignore[no-untyped-call]
    return _SAMPLED_PARENTS_ON.search(described) is not None


class LiteSpan(trace.Span):
    """A recording span of a ``LiteTracer``; ended once, by the code that started it."""

    __slots__ = ("_attributes", "_context", "_ended", "_events", "_kind", "_links", "_name", "_parent",
                 "_start", "_status", "_tracer")  # fmt: skip

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
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = attributes
        self._links = links
        self._events: list[Event] = []
        self._status = _UNSET
        self._start = start_time or time.time_ns()
        self._ended = False

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        if not self._ended:
            self._attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self._ended:
            self._attributes.update(attributes)

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
        if self._ended or self._status.status_code is StatusCode.OK:  # OK is final (the SDK's rule)
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
        t = self._tracer
        t.processor.on_end(
            ReadableSpan(
                self._name,
                self._context,
                self._parent,
                t.resource,
                self._attributes,
                self._events,
                self._links,
                self._kind,
                None,
                self._status,
                self._start,
                end_time or time.time_ns(),
                t.scope,
            )
        )


class LiteTracer(trace.Tracer):
    """``start_span`` of an SDK tracer's configuration, making ``LiteSpan``s (see the module's doc). A
    ``dict`` of attributes given to ``start_span`` becomes the span's own (callers build a fresh one)."""

    def __init__(self, sdk: SdkTracer) -> None:
        self.sampler = sdk.sampler
        self.ids = sdk.id_generator
        self.resource = _Resource(sdk.resource)
        self.processor = sdk.span_processor
        self.scope = sdk._instrumentation_scope  # what the SDK's own spans carry: the same scope
        self.follows_sampled_parents = follows_sampled_parents(sdk.sampler)

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
        else:
            trace_id = parent.trace_id
            if self.follows_sampled_parents and parent.trace_flags.sampled:  # the sampler's answer, known
                own = SpanContext(trace_id, self.ids.generate_span_id(), False, parent.trace_flags,
                                  parent.trace_state)  # fmt: skip
                attrs = attributes if type(attributes) is dict else dict(attributes or {})
                return LiteSpan(self, name, own, parent, kind, attrs, links, start_time)
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
