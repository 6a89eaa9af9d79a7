"""app.tracing.lite: the SDK's spans made cheaply must be the spans the SDK would have made (sampler,
ids, resource, scope, parent, status, events), read back from the SDK's in-memory exporter."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    AlwaysRecordSampler,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from rocksidecar.app.tracing.lite import (
    ROOT,
    LiteSpan,
    LiteTracer,
    _valid_context,
    decisions,
    follows_sampled_parents,
)

ALL = 2**64  # a bound every trace id is below

PARENT = SpanContext(
    0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=TraceState([("vendor", "v1")]),
)  # fmt: skip


def lite(sampler: Sampler = DEFAULT_ON) -> tuple[LiteTracer, TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler, resource=Resource.create({"service.name": "lite-test"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sdk = provider.get_tracer("rocksidecar")
    assert isinstance(sdk, trace.Tracer)
    return LiteTracer(sdk), provider, memory  # type: ignore[arg-type]


def under(parent: SpanContext) -> trace.Context:
    return trace.set_span_in_context(NonRecordingSpan(parent))


@pytest.mark.parametrize(
    ("sampler", "follows"),
    [
        (DEFAULT_ON, True),
        (DEFAULT_OFF, True),  # the root is off; a sampled parent is still followed
        (ParentBasedTraceIdRatio(0.01), True),
        (ALWAYS_ON, True),  # samples everything: under a sampled parent too
        (TraceIdRatioBased(0.5), False),
        (ParentBased(ALWAYS_ON, remote_parent_sampled=ALWAYS_OFF), False),
        (ParentBased(ALWAYS_ON, local_parent_sampled=TraceIdRatioBased(0.5)), False),
        # a nested ParentBased's own cases must not answer for the outer one
        (ParentBased(ParentBased(ALWAYS_ON), remote_parent_sampled=ALWAYS_OFF), False),
    ],
)
def test_a_sampled_parent_is_followed_only_where_the_sampler_says_so(sampler: Sampler, follows: bool) -> None:
    assert follows_sampled_parents(sampler) is follows


class _Sampled(TraceIdRatioBased):
    """A ratio sampler that decides otherwise: never read from its fields."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE)


def test_only_the_sdk_s_own_samplers_are_read_from_their_fields() -> None:
    half = TraceIdRatioBased(0.5)
    assert decisions(ParentBasedTraceIdRatio(0.5)) == (half.bound, ALL, 0, ALL, 0)
    assert decisions(half) == (half.bound,) * 5 and decisions(ALWAYS_OFF) == (0,) * 5
    assert decisions(ParentBased(ParentBased(ALWAYS_ON)))[ROOT] is None  # nested: asked
    assert decisions(_Sampled(0.5)) == (None,) * 5
    assert decisions(ParentBased(_Sampled(0.5)))[ROOT] is None
    assert decisions(AlwaysRecordSampler(ALWAYS_OFF)) == (None,) * 5  # RECORD_ONLY: asked


class FixedIds(IdGenerator):
    """The ids a test wants (the SDK's tracer and ours draw the same ones)."""

    def __init__(self, trace_id: int, random: bool) -> None:
        self.trace_id, self.random = trace_id, random

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return 0x1234

    def is_trace_id_random(self) -> bool:
        return self.random


_RATES = st.sampled_from([0.0, 1e-9, 0.01, 0.05, 0.5, 0.999, 1.0]) | st.floats(0.0, 1.0)
_DELEGATES = st.one_of(
    st.sampled_from([ALWAYS_ON, ALWAYS_OFF, DEFAULT_ON, AlwaysRecordSampler(ALWAYS_OFF)]),
    _RATES.map(TraceIdRatioBased),
    _RATES.map(_Sampled),
)
SAMPLERS = st.one_of(
    st.sampled_from([DEFAULT_ON, DEFAULT_OFF, ALWAYS_ON, ALWAYS_OFF]),
    _RATES.map(ParentBasedTraceIdRatio),
    _RATES.map(TraceIdRatioBased),
    st.builds(ParentBased, _DELEGATES, _DELEGATES, _DELEGATES, _DELEGATES, _DELEGATES),
)
PARENTS = st.none() | st.builds(
    lambda remote, flags, state: (remote, flags, state),
    st.booleans(),
    st.integers(0, 255),
    st.sampled_from([None, TraceState([("vendor", "v1")])]),
)


_HALF = TraceIdRatioBased(0.5).bound


@settings(max_examples=400, deadline=None)
@example(ParentBasedTraceIdRatio(0.5), (5 << 64) | (_HALF - 1), None, True)  # just under the bound
@example(ParentBasedTraceIdRatio(0.5), (5 << 64) | _HALF, None, True)  # at it: dropped
@example(TraceIdRatioBased(0.5), _HALF, (False, 1, None), False)  # the ratio ignores a sampled parent
@given(
    SAMPLERS,
    st.integers(1, 2**128 - 1),
    PARENTS,
    st.booleans(),
)
def test_decisions_are_the_sdk_s(
    sampler: Sampler, trace_id: int, parent: tuple[bool, int, TraceState | None] | None, random: bool
) -> None:
    """Whatever the sampler, trace id and parent (none, remote or local, any flags, a trace state),
    LiteTracer's span has the SDK tracer's decision, flags, trace state and attributes."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler, id_generator=FixedIds(trace_id, random))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sdk = provider.get_tracer("rocksidecar")
    context = None
    if parent is not None:
        remote, flags, state = parent
        context = under(SpanContext(trace_id, 0xABC, remote, TraceFlags(flags), state))
    made = []
    for tracer in (sdk, LiteTracer(sdk)):  # type: ignore[arg-type]
        span = tracer.start_span("send T", context, SpanKind.PRODUCER, {"messaging.system": "rocketmq"})
        made.append((span.is_recording(), span.get_span_context()))
        span.end()
    assert made[1] == made[0]
    if made[0][1].trace_flags.sampled:  # exported (a RECORD_ONLY span records, but is not exported)
        sdk_span, lite_span = memory.get_finished_spans()
        assert lite_span.attributes == sdk_span.attributes and lite_span.parent == sdk_span.parent


def test_a_span_under_a_sampled_parent_is_the_sdk_s_span() -> None:
    tracer, provider, memory = lite()
    span = tracer.start_span("send T", under(PARENT), SpanKind.PRODUCER, {"messaging.system": "rocketmq"})
    assert isinstance(span, LiteSpan) and span.is_recording()
    span.set_attribute("messaging.destination.name", "T")
    span.end()
    span.set_attribute("late", 1)  # after the end: ignored, as the SDK does
    (got,) = memory.get_finished_spans()
    assert got.name == "send T" and got.kind is SpanKind.PRODUCER
    assert got.context is not None and got.parent == PARENT
    assert got.context.trace_id == PARENT.trace_id and got.context.span_id != PARENT.span_id
    assert got.context.trace_flags.sampled and got.context.trace_state == PARENT.trace_state
    assert dict(got.attributes or {}) == {"messaging.system": "rocketmq", "messaging.destination.name": "T"}
    assert got.start_time is not None and got.end_time is not None and got.start_time <= got.end_time
    # what the SDK's own span of the same tracer carries
    with provider.get_tracer("rocksidecar").start_as_current_span("sdk"):
        pass
    sdk = memory.get_finished_spans()[-1]
    assert got.resource == sdk.resource and got.resource.attributes["service.name"] == "lite-test"
    assert got.instrumentation_scope == sdk.instrumentation_scope


def test_the_sampler_is_asked_where_its_answer_is_not_known() -> None:
    tracer, _, memory = lite(DEFAULT_OFF)  # roots are dropped
    root = tracer.start_span("receive T", None, SpanKind.SERVER)
    assert not root.is_recording() and not root.get_span_context().trace_flags.sampled
    root.end()
    unsampled = SpanContext(PARENT.trace_id, PARENT.span_id, is_remote=True, trace_flags=TraceFlags(0))
    assert not tracer.start_span("send T", under(unsampled)).is_recording()
    assert memory.get_finished_spans() == ()
    tracer, provider, memory = lite(ALWAYS_ON)  # not followed: asked, and it samples a root
    tracer.start_span("receive T", None, SpanKind.SERVER).end()
    provider.get_tracer("rocksidecar").start_span("sdk root").end()
    got, sdk = memory.get_finished_spans()
    assert got.parent is None and got.context is not None and got.context.trace_flags.sampled
    assert sdk.context is not None and got.context.trace_flags == sdk.context.trace_flags  # random id too


def test_errors_status_and_events_are_recorded_as_the_sdk_does() -> None:
    tracer, _, memory = lite()
    span = tracer.start_span("send T", under(PARENT))
    span.add_event("send attempt failed", {"rocksidecar.attempt": "broker-a: timeout"})
    span.record_exception(TimeoutError("no answer"))
    span.set_status(Status(StatusCode.ERROR, "TimeoutError: no answer"))
    span.end()
    ok = tracer.start_span("send T", under(PARENT))
    ok.set_status(StatusCode.OK)
    ok.set_status(StatusCode.ERROR)  # OK is final
    ok.end()
    failed, fine = memory.get_finished_spans()
    assert [e.name for e in failed.events] == ["send attempt failed", "exception"]
    exception = failed.events[1].attributes or {}
    assert exception["exception.type"] == "TimeoutError" and exception["exception.message"] == "no answer"
    assert "TimeoutError: no answer" in str(exception["exception.stacktrace"])
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "TimeoutError: no answer"
    assert fine.status.status_code is StatusCode.OK


def test_a_span_context_is_the_tuple_the_fast_paths_read_by_position() -> None:
    """lite.LiteTracer.child, spans.traceparent, otlp._lite_span and loop_export's on_end read a
    SpanContext by position (a property per field cost more than the rest of those steps), and
    lite._valid_context makes one as that tuple: if the API changes its layout, this names it."""
    from opentelemetry.trace import SpanContext, TraceFlags, TraceState

    state = TraceState([("k", "v")])
    context = SpanContext(0xA, 0xB, True, TraceFlags(1), state)
    fields = ("trace_id", "span_id", "is_remote", "trace_flags", "trace_state", "is_valid")
    assert tuple(context) == tuple(getattr(context, f) for f in fields) == (0xA, 0xB, True, 1, state, True)
    made = _valid_context((0xA, 0xB, True, TraceFlags(1), state, True))
    assert made == context and type(made) is SpanContext and made.is_valid
