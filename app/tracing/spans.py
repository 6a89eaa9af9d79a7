"""OpenTelemetry spans of the send path, named after OpenTelemetry's messaging semantic conventions
(``{operation} {destination}``, ``messaging.system=rocketmq``, ``messaging.operation.type``, ...).

Off unless ``configure`` was given a tracer provider (``setup_from_env`` builds one from the ``otel``
extra); while off, ``ON`` is False and the hooks in the send path are that one check. The spans:

- ``receive {topic}`` (SERVER): the sidecar accepting a message, child of the request's traceparent. Its
  context replaces the message's ``TRACE_CONTEXT``, so everything later (a replay an hour on, the
  consumer's process span) can point back to the request that accepted it.
- ``send {topic}`` (PRODUCER): one per producer call, child of ``receive``; in-producer retries on another
  broker are events on it (``send attempt failed``).
- ``spool {topic}`` / ``schedule {topic}`` (INTERNAL): the local store taking a message.
- a replay's ``send {topic}`` and a due delayed message's ``publish {topic}`` (PRODUCER) start a trace
  of their own and *link* to the accepting ``receive`` span (OpenTelemetry's rule for work that outlives
  its request).
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from enum import Enum
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeVar, cast

from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from rocksidecar.rmq import Message, RocketMQError, SendResult
from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.errors import SendFailed
from rocksidecar.rmq.message import MessageExt
from rocksidecar.rmq.sender import BatchResults

from ..bounded import remember
from .context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY, TraceContext, inherit, of_properties
from .semconv import OUTCOME, message_attributes, result_attributes
from .semconv import facts as message_facts
from .semconv import named as _named
from .tracestate import trace_state
from .watched import Delegating, WatchedSender

if TYPE_CHECKING:  # the otel extra's: imported only when spans are on (_lite)
    from .fast import FastSpan, Recorder, Shape
    from .lite import LiteTracer, Preset

ON = False  # the one check of the hot paths
_SKIP_UNSAMPLED = False  # the sampler drops whatever an unsampled remote parent starts: do not start it
_SKIP_DROPPED_ROOTS = False  # the same for an unsampled local parent: a root span the sampler dropped
# The traceparent of the request whose work is under way on the sample-free path (receive), else None.
# It stands in for making the request's context current in OpenTelemetry (a Context copy, a SpanContext
# and a token each way: ~10x the cost): the hooks below skip their spans while it is set, and log lines
# take their trace id from it. A span of ours made current clears it for its block (_Current).
_FREE: ContextVar[str | None] = ContextVar("rocksidecar_sample_free", default=None)
# The receive span of the request under way, when a LiteTracer made it (opened). It stands in for making
# that span current in OpenTelemetry's context (set_span_in_context's Context copy, attach and detach:
# ~3 us a request, bench/RESULTS.md session 17): the spans below find their parent here (_parent,
# _send_span), and log lines their trace id. A span of ours made current clears it for its block
# (_Current), so that OpenTelemetry's context is the one that speaks there.
_RECEIVING: ContextVar[Span | None] = ContextVar("rocksidecar_receiving", default=None)
_ROOTS: LiteTracer | None = None  # the tracer, when a root's sampling is known from its sampler's fields
# the tracer, when a LiteTracer: its ``child`` for spans whose parent is known
_LITE: LiteTracer | None = None
_tracer: trace.Tracer = trace.NoOpTracer()
MAX_PRESETS = 4096  # (operation, topic) encodings kept; the topics allowed bound it in practice
_PRESETS: dict[tuple[str, str], Preset] = {}
# The request's own receive and send spans as app.tracing.fast records them, when the loop's processor is
# the one (Recorder.of): their shapes per (operation, topic, remote parent), and FastSpan's type (the
# class is the otel extra's; ``type(span) is _FAST_SPAN`` is the check).
_FAST: Recorder | None = None
_FAST_SPAN: type[FastSpan] | None = None
_RECEIVED: dict[str, Shape] = {}  # receive spans under a request's traceparent, by topic
_ROOTED: dict[str, Shape] = {}  # receive spans of requests without one
_SENT: dict[str, Shape] = {}  # the request's send spans
_time_ns = time.time_ns
# a result's status (an Enum member, by id) -> its outcome attribute, and that as a span's attributes
_OUTCOMES: dict[int, tuple[Enum, tuple[str, dict[str, Any]]]] = {}
MAX_LINKS = 128  # a replayed batch links to each message's request, up to this many
DELAY_DUE_AT = "DELAY_DUE_AT"  # delay.DELAY_DUE_AT: a delayed message being published carries it
# On a consume span whose delivery was withdrawn before the app had it (Withdrawn): no error status.
DROPPED = "rocksidecar.dropped"
_T = TypeVar("_T")
_D = TypeVar("_D", bool, Sequence[ConsumeStatus])  # a delivery's answer: taken, or a batch's statuses


def configure(provider: trace.TracerProvider | None, *, lite: bool = True, fast: bool = True) -> None:
    """Spans from ``provider`` (None: off). Not the global provider: tests give their own. ``lite``:
    the SDK's spans made by app.tracing.lite (False: by the SDK's own tracer, which bench.tracing_cpu
    measures beside it). ``fast``: a request's receive and send spans recorded by app.tracing.fast
    where it can (False: LiteSpans, which tests compare it with). The provider's span processors are
    read now: add them before."""
    global ON, _tracer, _SKIP_UNSAMPLED, _SKIP_DROPPED_ROOTS, _ROOTS, _LITE, _FAST, _FAST_SPAN
    ON = provider is not None
    if provider is None:
        _tracer = trace.NoOpTracer()
    else:
        tracer = provider.get_tracer("rocksidecar")
        _tracer = _lite(tracer) if lite else tracer
    _SKIP_UNSAMPLED = provider is not None and _drops_unsampled_parents(provider, remote=True)
    _SKIP_DROPPED_ROOTS = provider is not None and _drops_unsampled_parents(provider, remote=False)
    knows_roots = _SKIP_DROPPED_ROOTS and getattr(_tracer, "knows_roots", False)
    _ROOTS = cast("LiteTracer", _tracer) if knows_roots else None
    _LITE = cast("LiteTracer", _tracer) if getattr(_tracer, "is_lite", False) else None
    _FAST = _FAST_SPAN = None
    if _LITE is not None and fast:
        from .fast import FastSpan, Recorder
        from .otlp import shape_bytes

        _FAST = Recorder.of(_LITE, shape_bytes)
        _FAST_SPAN = FastSpan if _FAST is not None else None
    _PRESETS.clear()  # encoded by the tracer's encoder (one per provider)
    for shapes in (_RECEIVED, _ROOTED, _SENT):
        shapes.clear()


def _lite(tracer: trace.Tracer) -> trace.Tracer:
    """The SDK's tracer as a LiteTracer (app.tracing.lite: its spans at a fraction of the cost); a
    tracer of another implementation as it is."""
    try:
        from opentelemetry.sdk.trace import Tracer as SdkTracer

        from .lite import LiteTracer
    except ImportError:  # the otel extra is not installed: the provider is someone else's
        return tracer
    return LiteTracer(tracer) if isinstance(tracer, SdkTracer) else tracer


def _drops_unsampled_parents(provider: trace.TracerProvider, *, remote: bool) -> bool:
    """Whether ``provider``'s sampler drops every span under an unsampled remote (or local) parent (the
    default, ParentBased, does). Asked once, with the trace id a ratio sampler would always keep, so a
    sampler that does not follow the parent answers no. When yes, a request whose traceparent is
    unsampled (remote), or whose root span the sampler dropped (local), takes the sample-free path: no
    span objects below it (see receive)."""
    sampler = getattr(provider, "sampler", None)
    if sampler is None:
        return False
    unsampled = SpanContext(1, 1, is_remote=remote, trace_flags=TraceFlags(0))
    parent = trace.set_span_in_context(NonRecordingSpan(unsampled))
    result = sampler.should_sample(parent, 1, "probe", SpanKind.SERVER)
    return not result.decision.is_sampled() and not result.decision.is_recording()


def setup_from_env(on: bool, env: Mapping[str, str] = os.environ) -> Callable[[], None] | None:
    """``on`` (``ROCKSIDECAR_OTEL=true``): the SDK with a batching OTLP exporter, both configured by the
    standard ``OTEL_*`` variables (endpoint, protocol, headers, service name, sampler). Returns the
    provider's shutdown (flushes what is queued), or None when off.

    Raises:
        RuntimeError: asked for, but the ``otel`` extra is not installed (one line saying so).
    """
    if not on:
        return None
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from . import loop_export
        from .otlp import exporter  # the OTLP exporters with a cheaper encoding (spancost)
    except ImportError:
        raise RuntimeError(
            "ROCKSIDECAR_OTEL=true needs the otel extra: pip install 'rocksidecar[otel]'"
        ) from None
    try:  # the event loop exports, no thread (loop_export), unless the settings need the SDK's exporter
        on_loop = loop_export.processor(env)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None
    provider = TracerProvider()  # resource and sampler from OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...
    provider.add_span_processor(on_loop or BatchSpanProcessor(exporter(loop_export.protocol(env))))
    configure(provider)
    return provider.shutdown


def current_trace_fields() -> dict[str, str]:
    """``{"trace_id": ...}`` of the span current where a log line is written (or of the request on the
    sample-free path), else ``{}``."""
    free = _FREE.get()
    if free is not None:
        return {"trace_id": free[3:35]}
    receiving = _RECEIVING.get()
    sc = (receiving or trace.get_current_span()).get_span_context()
    return {"trace_id": f"{sc.trace_id:032x}"} if sc.is_valid else {}


def span_context(ctx: TraceContext) -> SpanContext:
    return _remote(ctx.traceparent, ctx.tracestate)


def _remote(parent: str, state: str | None) -> SpanContext:
    """The SpanContext of a traceparent already checked (app.tracing.context): read by position."""
    return SpanContext(
        int(parent[3:35], 16),
        int(parent[36:52], 16),
        True,
        _FLAGS[int(parent[53:55], 16)],
        trace_state(state) if state else None,  # not from_header: it logs for a Level 2 key
    )


_FLAGS = [TraceFlags(n) for n in range(256)]  # a traceparent's flags byte, each made once


def traceparent(span: Span) -> str | None:
    context: Any = span.get_span_context()  # a SpanContext is a tuple: read by position
    trace_id, span_id, _, flags, _, valid = context
    if not valid:
        return None
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


class _Current:
    """``span`` current for a ``with`` block, ended after it, an exception recorded on it: what
    ``trace.use_span(span, end_on_exit=True)`` does, without a generator per span. The sample-free
    path's mark is cleared inside (a span of ours started there is current, not the request).
    ``receiving``: a request's receive span, marked in ``_RECEIVING`` instead of attached to
    OpenTelemetry's context (see there); otherwise that mark is cleared for the block."""

    __slots__ = ("free", "mark", "receiving", "span", "token")

    def __init__(self, span: Span, *, receiving: bool = False) -> None:
        self.span = span
        self.mark = receiving

    def __enter__(self) -> Span:
        self.free = _FREE.set(None) if _FREE.get() is not None else None  # set only when it is marked
        self.token: Token[Context] | None = None
        self.receiving: Token[Span | None] | None
        if self.mark:
            self.receiving = _RECEIVING.set(self.span)
        else:
            self.token = context.attach(trace.set_span_in_context(self.span))
            self.receiving = _RECEIVING.set(None) if _RECEIVING.get() is not None else None
        return self.span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        span = self.span
        if exc is not None:
            _failed(span, exc)
        if self.free is not None:
            _FREE.reset(self.free)
        if self.receiving is not None:
            _RECEIVING.reset(self.receiving)
        if self.token is not None:
            context.detach(self.token)
        span.end()


class Withdrawn(Exception):
    """Raised by a delivery the consumer took back before the app had it (its queue was rebalanced away,
    app.subscriptions.stream.QueueDropped): nothing failed and nobody was asked, so the spans it ends
    get ``rocksidecar.dropped=true`` and neither an error status nor an exception event (OpenTelemetry's
    messaging conventions keep those, and ``error.type``, for an operation that failed; else every
    rebalance would show as a burst of consume errors)."""


def _failed(span: Span, exc: BaseException) -> None:
    """``exc`` recorded on ``span``, its status an error unless ``exc`` is a cancellation or an exit, or
    a withdrawn delivery (marked so instead)."""
    if span.is_recording():
        if isinstance(exc, Withdrawn):
            span.set_attribute(DROPPED, True)
            return
        span.record_exception(exc)
        if isinstance(exc, Exception):
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


def _preset(operation: str, topic: str) -> Preset | None:
    """The encoding of ``_named(operation, topic)``, made once per operation and topic (lite.Preset)."""
    key = (operation, topic)
    got = _PRESETS.get(key)
    if got is None and _LITE is not None:
        from .otlp import preset  # the otel extra's, as the LiteTracer is

        got = remember(_PRESETS, key, preset(_named(operation, topic)), MAX_PRESETS)
    return got


def _shape(
    shapes: dict[str, Shape], fast: Recorder, operation: str, topic: str, kind: SpanKind, remote: bool
) -> Shape:
    """The FastSpan shape of ``{operation} {topic}`` spans (``_named`` leading), made once per topic
    and kept in ``shapes`` (one dict per operation and parent's remoteness: the hot paths look up the
    topic alone)."""
    made = fast.shape(f"{operation} {topic}", kind, remote, _named(operation, topic))
    return remember(shapes, topic, made, MAX_PRESETS)


def _message_attributes(msg: Message, operation: str) -> dict[str, Any]:
    return message_attributes(msg, _named(operation, msg.topic))


def _carrying(msg: Message, span: Span) -> Message:
    """``msg`` carrying ``span``'s context."""
    parent = traceparent(span)
    return msg if parent is None else _with_traceparent(msg, parent)


def _with_traceparent(msg: Message, parent: str, state: str | None = None) -> Message:
    """``msg`` with ``parent`` as its traceparent, and ``state`` as its tracestate if given (a new
    Message, positional: a tenth of replace()'s cost)."""
    properties = {**msg.properties, TRACEPARENT_PROPERTY: parent}
    if state is not None:
        properties[TRACESTATE_PROPERTY] = state
    return Message(msg.topic, msg.body, msg.tags, msg.keys, properties, msg.flag, msg.id)


async def receive(msg: Message, handle: Callable[[Message], Awaitable[_T]]) -> _T:
    """``handle(msg)`` inside a ``receive {topic}`` span, ``msg`` carrying the span's context. The
    message's own attributes go on the send span, which every accepted message has or spools from.

    The sample-free path: a request the sampler leaves out (an unsampled traceparent, or a root span it
    dropped) when it drops everything under such a parent too (the default, every ``parentbased_*``)
    makes no span objects below ``receive``: its traceparent (as it came, or the dropped root's) is
    carried on and marked in ``_FREE``, where logs read the trace id and the hooks see they have no
    span to make. (app.api.operations takes the same steps itself, ``opened`` and ``closed``: a
    coroutine and a lambda less per message.)"""
    carried, span, held = opened(msg)
    try:
        result = await handle(carried)
    except BaseException as exc:
        closed(span, held, exc=exc)
        raise
    closed(span, held, result)
    return result


def opened(msg: Message, trace: TraceContext | None = None) -> tuple[Message, Span | None, Any]:
    """A request's first step, for ``msg`` under the request's ``trace`` context (inherited unless the
    message carries its own, app.tracing.context.inherit): the message to hand on, the request's
    ``receive`` span, and what ``closed`` takes at the end of its block, in the same task.

    The sample-free path (see ``receive``) gives no span: the message carries the traceparent it came
    with (or the dropped root's), marked in ``_FREE``. A sampled FastSpan (app.tracing.fast), the
    usual, is marked in ``_RECEIVING`` and its message built once, with the request's context and
    the span's traceparent; any other span is entered as ``enter`` says."""
    properties = msg.properties
    own = properties.get(TRACEPARENT_PROPERTY)  # checked by prepare() (clean) or inherit(): valid
    parent: str | None
    if own is not None:
        parent, state = own, properties.get(TRACESTATE_PROPERTY)
    elif trace is not None:
        parent, state = trace.traceparent, trace.tracestate
    else:
        parent = state = None
    if parent is None:
        started = _root(msg)
    else:
        if _SKIP_UNSAMPLED and parent[54] in _UNSAMPLED_FLAG_DIGITS:  # carried on as it came
            return (msg if own is not None or trace is None else inherit(msg, trace)), None, _FREE.set(parent)
        fast = _FAST
        span = None
        if fast is not None:
            topic = msg.topic
            shape = _RECEIVED.get(topic) or _shape(_RECEIVED, fast, "receive", topic, SpanKind.SERVER, True)
            span = fast.remote_child(shape, parent, state)
            if span is not None and _FREE.get() is None:
                # one message built: the span's context, and the request's state unless its own
                carried = _with_traceparent(msg, span.traceparent(), state if own is None else None)
                return carried, span, _RECEIVING.set(span)
        if own is None and trace is not None:
            msg = inherit(msg, trace)
        started = span if span is not None else _remote_receive(msg.topic, parent, state)
    if isinstance(started, Message):  # a dropped root: the sample-free path
        return started, None, _FREE.set(started.properties[TRACEPARENT_PROPERTY])
    carried_msg, held = enter(started, msg)
    return carried_msg, started, held


def _remote_receive(topic: str, parent: str, state: str | None) -> Span:
    """The receive span under a request's ``parent`` traceparent that app.tracing.fast does not record:
    a LiteTracer's, else the tracer's (perhaps not recording)."""
    remote = _remote(parent, state)
    name = f"receive {topic}"
    attrs = _named("receive", topic)
    lite = _LITE
    if lite is not None and (
        span := lite.child(name, remote, SpanKind.SERVER, attrs, _preset("receive", topic))
    ):
        return span
    return _tracer.start_span(
        name, trace.set_span_in_context(NonRecordingSpan(remote)), SpanKind.SERVER, attrs
    )


def enter(span: Span, msg: Message) -> tuple[Message, Any]:
    """The block of the receive ``span`` begins: ``msg`` carrying the span's context, and what
    ``closed`` takes at its end (in the same task). A LiteTracer's span is marked in ``_RECEIVING``
    rather than attached to OpenTelemetry's context (``_Current``); a FastSpan the same way, inline,
    its mark's token all that is held."""
    if type(span) is _FAST_SPAN and _FREE.get() is None:
        fast: Any = span
        return _with_traceparent(msg, fast.traceparent()), _RECEIVING.set(span)
    current = _Current(span, receiving=_LITE is not None)
    current.__enter__()
    return _carrying(msg, span), current


def closed(span: Span | None, held: Any, result: object = None, exc: BaseException | None = None) -> None:
    """The block ``opened`` began ends with ``result`` (its status is the span's outcome) or ``exc``
    (recorded on it); the span ends. On the sample-free path (no span) the ``_FREE`` mark is reset."""
    if span is None:
        _FREE.reset(held)
        return
    outcome = _outcome(result) if exc is None else None
    if type(held) is _Current:
        if outcome is not None and span.is_recording():
            span.set_attribute(OUTCOME, outcome[0])
        held.__exit__(None if exc is None else type(exc), exc, None)
        return
    _RECEIVING.reset(held)
    fast: Any = span
    if exc is not None:
        _failed(span, exc)
    elif outcome is not None and fast._attrs is None and not fast._end:
        # the usual: the outcome its one attribute, a dict shared by the spans of that outcome. It is
        # never changed: the span ends below, and an ended span's attributes are not set again
        fast._attrs = outcome[1]
    elif outcome is not None:
        span.set_attribute(OUTCOME, outcome[0])
    span.end()


def _outcome(result: object) -> tuple[str, dict[str, Any]] | None:
    """The ``rocksidecar.outcome`` of a request's ``result`` (its status's value, if it has one), and
    that as the attributes of a span (a dict not to be changed)."""
    status = getattr(result, "status", None)
    if status is None:
        return None
    known = _OUTCOMES.get(id(status))  # an Enum's value is a Python-level property, its hash too
    if known is not None and known[0] is status:
        return known[1]
    outcome = str(getattr(status, "value", status))
    made = (outcome, {OUTCOME: outcome})
    if isinstance(status, Enum):  # kept while it lives: a member, for good
        remember(_OUTCOMES, id(status), (status, made), MAX_PRESETS)
    return made


def _parent() -> Context | None:
    """The context a span of ours starts in: the receive span's (``_RECEIVING``) when one is under way,
    else None (OpenTelemetry's current one)."""
    receiving = _RECEIVING.get()
    return None if receiving is None else trace.set_span_in_context(receiving)


_UNSAMPLED_FLAG_DIGITS = frozenset("02468ace")  # a traceparent's last hex digit without the sampled bit


def _root(msg: Message) -> Span | Message:
    """The receive span of a request without a traceparent; or, when the sampler drops it and all
    under it (the sample-free path), ``msg`` carrying the dropped root's traceparent. A LiteTracer whose
    root decision is known (_ROOTS) makes no span object for a dropped root (~4x cheaper); it is used
    only where nothing else is current, as start_span would then find no parent either."""
    roots = _ROOTS
    if roots is not None and _RECEIVING.get() is None and not context.get_current():
        trace_id = roots.ids.generate_trace_id()
        dropped = roots.dropped_root(trace_id)
        if dropped is not None:
            return _with_traceparent(msg, dropped)
        fast = _FAST
        if fast is not None:
            topic = msg.topic
            shape = _ROOTED.get(topic) or _shape(_ROOTED, fast, "receive", topic, SpanKind.SERVER, False)
            return fast.root(shape, trace_id)
        attrs = _named("receive", msg.topic)
        preset = _preset("receive", msg.topic)
        return roots.start_root(f"receive {msg.topic}", trace_id, SpanKind.SERVER, attrs, preset)
    span = _tracer.start_span(
        f"receive {msg.topic}", _parent(), SpanKind.SERVER, _named("receive", msg.topic)
    )
    if _SKIP_DROPPED_ROOTS and not span.is_recording():
        carried = _carrying(msg, span)
        if carried is not msg:  # the dropped root's context is valid: carry it, nothing below
            return carried
    return span


async def receive_batch(msgs: Sequence[Message], handle: Callable[[list[Message]], Awaitable[_T]]) -> _T:
    """``handle`` inside one ``receive`` span for a batch: its messages without a trace context of their
    own carry the span's; those with one keep it and are the span's links (one a distinct context, up to
    MAX_LINKS: the messages that inherited the request's header all link to it once)."""
    own = [TRACEPARENT_PROPERTY in m.properties for m in msgs]
    links = _distinct_links(  # checked already (prepare, inherit): read as they are
        (m.properties[TRACEPARENT_PROPERTY], m.properties.get(TRACESTATE_PROPERTY))
        for m, has_own in zip(msgs, own, strict=True)
        if has_own
    )
    attrs: dict[str, Any] = {"messaging.system": "rocketmq", "messaging.operation.type": "receive",
             "messaging.batch.message_count": len(msgs)}  # fmt: skip
    span = _tracer.start_span("receive", _parent(), SpanKind.SERVER, attrs, links)
    with _Current(span):
        return await handle(
            [m if has_own else _carrying(m, span) for m, has_own in zip(msgs, own, strict=True)]
        )


def _links(carried: Iterable[Mapping[str, str]]) -> list[Link]:
    """Links to the trace contexts the first MAX_LINKS of ``carried`` (messages' properties) hold:
    checked again, since a stored message's was written by the sidecar or an older one, a consumed
    one's by any producer."""
    return _distinct_links(own for own in map(of_properties, islice(carried, MAX_LINKS)) if own is not None)


def _distinct_links(contexts: Iterable[tuple[str, str | None]]) -> list[Link]:
    """A link to each distinct (valid traceparent, tracestate) of ``contexts`` (a TraceContext is one),
    at most MAX_LINKS: the messages of one request share its context, and linked it once each."""
    links: list[Link] = []
    seen: set[tuple[str, str | None]] = set()
    for carried in contexts:
        if carried not in seen:
            seen.add(carried)
            links.append(Link(_remote(*carried)))
            if len(links) == MAX_LINKS:
                break
    return links


def _send_span(msgs: Sequence[Message], background: bool) -> Span:
    first = msgs[0]
    operation = "publish" if background and DELAY_DUE_AT in first.properties else "send"
    attrs = _message_attributes(first, "send")
    if len(msgs) > 1:
        attrs["messaging.batch.message_count"] = len(msgs)
        attrs.pop("messaging.message.id", None)
    if not background:  # a child of the request's receive span (the current one)
        name = f"{operation} {first.topic}"
        lite = _LITE
        if lite is not None:
            parent = (_RECEIVING.get() or trace.get_current_span()).get_span_context()
            preset = _preset("send", first.topic)  # _message_attributes starts with _named("send", topic)
            if parent.is_valid and (span := lite.child(name, parent, SpanKind.PRODUCER, attrs, preset)):
                return span
        return _tracer.start_span(name, _parent(), SpanKind.PRODUCER, attrs)
    attrs["rocksidecar.replay"] = operation == "send"
    root = trace.set_span_in_context(trace.INVALID_SPAN)  # a trace of its own, linked to the request's
    links = _links(m.properties for m in msgs)
    return _tracer.start_span(f"{operation} {first.topic}", root, SpanKind.PRODUCER, attrs, links)


def _sent(span: Span, result: SendResult) -> None:
    if span.is_recording():  # one call, one lock: the result's attributes together
        span.set_attributes(result_attributes(result))


def _send_shape(receiving: FastSpan, topic: str) -> Shape:
    return _shape(_SENT, receiving._recorder, "send", topic, SpanKind.PRODUCER, False)


def _failed_send(span: Span, exc: BaseException) -> None:
    """A request's send span ended by ``exc``: its attempts, its error, its end."""
    if isinstance(exc, RocketMQError):
        _record_attempts(span, exc)
    _failed(span, exc)
    span.end()


def _record_attempts(span: Span, exc: BaseException) -> None:
    if isinstance(exc, SendFailed):
        for attempt in exc.attempts:
            span.add_event("send attempt failed", {"rocksidecar.attempt": str(attempt)[:200]})
    span.set_attribute("error.type", type(exc).__name__)


class TracedSender(WatchedSender):
    """A Sender whose every call is a ``send``/``publish`` span (see the module's doc); ``background``:
    the replay and delay loops' sender, whose spans link to the accepting request instead of nesting."""

    def __init__(self, inner: Any, *, background: bool) -> None:
        super().__init__(inner)
        self._background = background

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        """On the sample-free path the inner send at once: no span, and not the lambda and coroutine of
        WatchedSender's hook either (bench/RESULTS.md, tracecost: what the sample-free path costs)."""
        if self._background:
            return await super().send(msg, sharding_key=sharding_key, validated=validated)
        sent: SendResult
        if _FREE.get() is not None:
            sent = await self._inner.send(msg, sharding_key=sharding_key, validated=validated)
            return sent
        # A request's send span is a leaf (nothing the producer does starts a span under it: its retries
        # are events on it), so it is not made current: no OpenTelemetry context attached and detached
        # per send, and a log line inside still carries the request's trace id (its receive span's).
        receiving: Any = _RECEIVING.get()
        if type(receiving) is _FAST_SPAN and receiving.samples_children():
            # a FastSpan request's send (app.tracing.fast), sampled: kept by it
            shape = _SENT.get(msg.topic) or _send_shape(receiving, msg.topic)
            start = _time_ns()
            try:
                sent = await self._inner.send(msg, sharding_key=sharding_key, validated=validated)
            except BaseException as exc:  # a failed send is a child span of its own, with the failure
                child: Any = receiving.child(shape, message_facts(msg), start)  # sampled: asked above
                _failed_send(child, exc)
                raise
            if not receiving.keep_send(shape, start, msg, sent):
                child = receiving.child(shape, message_facts(msg), start)
                child.sent(sent)
                child.end()
            return sent
        span = _send_span([msg], False)
        try:
            sent = await self._inner.send(msg, sharding_key=sharding_key, validated=validated)
        except BaseException as exc:
            _failed_send(span, exc)
            raise
        _sent(span, sent)
        span.end()
        return sent

    async def _one(self, msg: Message, call: Callable[[], Awaitable[SendResult]]) -> SendResult:
        span = _send_span([msg], self._background)
        with _Current(span):
            try:
                result = await call()
            except RocketMQError as exc:
                _record_attempts(span, exc)
                raise
            _sent(span, result)
            return result

    async def _many(
        self, messages: Sequence[Message], call: Callable[[], Awaitable[BatchResults]]
    ) -> BatchResults:
        if not self._background and _FREE.get() is not None:  # the sample-free path: no span below
            return await call()
        span = _send_span(messages, self._background)
        with _Current(span):
            results = await call()
            failed = [r for r in results if isinstance(r, RocketMQError)]
            if failed:
                span.set_attribute("rocksidecar.failed", len(failed))
                _record_attempts(span, failed[0])
            return results


async def internal(name: str, topic: str, count: int, work: Awaitable[_T]) -> _T:
    """``work`` inside an INTERNAL ``{name} {topic}`` span (spool, schedule)."""
    if _FREE.get() is not None:  # the sample-free path: no span below
        return await work
    attrs: dict[str, Any] = {"messaging.system": "rocketmq", "messaging.destination.name": topic,
             "messaging.batch.message_count": count}  # fmt: skip
    with _Current(_tracer.start_span(f"{name} {topic}", _parent(), SpanKind.INTERNAL, attrs)):
        return await work


class TracedSpool(Delegating):
    """The retry store as the send path spools into it, each spool a ``spool {topic}`` span."""

    async def spool(self, record: Any, due_ms: int | None = None) -> object:
        return await internal("spool", record.topic, 1, self._inner.spool(record, due_ms))

    async def spool_many(self, records: Sequence[Any], due_ms: int | None = None) -> object:
        topic = records[0].topic if records else ""
        return await internal("spool", topic, len(records), self._inner.spool_many(records, due_ms))


class TracedSchedule(Delegating):
    """The delay store (or the Rock-DMQ forwarder) as the send path schedules into it."""

    async def schedule(self, msg: Any) -> None:
        await internal("schedule", msg.topic, 1, self._inner.schedule(msg))

    async def schedule_many(self, msgs: Sequence[Any]) -> None:
        topic = msgs[0].topic if msgs else ""
        await internal("schedule", topic, len(msgs), self._inner.schedule_many(msgs))


def _consumer_attributes(topic: str, group: str) -> dict[str, Any]:
    attrs = _named("process", topic)
    attrs["messaging.consumer.group.name"] = group
    return attrs


async def _delivered(topic: str, endpoint: str, deliver: Awaitable[_D]) -> _D:
    """``deliver`` inside a ``deliver {topic}`` (CLIENT) span: the handing over to the app."""
    attrs = {"messaging.system": "rocketmq", "url.full": endpoint}
    with _Current(_tracer.start_span(f"deliver {topic}", _parent(), SpanKind.CLIENT, attrs)) as d:
        result = await deliver
        if d.is_recording():  # taken or not; of a batch, how many the app took
            taken = result if isinstance(result, bool) else sum(s is ConsumeStatus.SUCCESS for s in result)
            d.set_attribute("rocksidecar.delivered", taken)
        return result


async def process(msg: MessageExt, group: str, endpoint: str, deliver: Awaitable[bool]) -> bool:
    """A consumed message handed to the app: a ``process {topic}`` (CONSUMER) span, child of the trace
    context the message carries (the sender's), around a ``deliver {topic}`` (CLIENT) span for the
    POSTs to the app (``endpoint``: its URL, or ``grpc`` for a Subscribe stream); ``deliver`` answers
    whether the app took it."""
    own = of_properties(msg.user_properties)  # from the broker: checked
    parent = trace.set_span_in_context(NonRecordingSpan(span_context(own))) if own else None
    attrs = _consumer_attributes(msg.topic, group)
    attrs["messaging.message.id"] = msg.msg_id
    attrs["messaging.rocketmq.message.reconsume_times"] = msg.reconsume_times
    span = _tracer.start_span(f"process {msg.topic}", parent, SpanKind.CONSUMER, attrs)
    with _Current(span):
        ok = await _delivered(msg.topic, endpoint, deliver)
        if not ok:
            span.set_attribute("error.type", "not_delivered")
        return ok


async def process_batch(
    msgs: Sequence[MessageExt], group: str, endpoint: str, deliver: Awaitable[Sequence[ConsumeStatus]]
) -> Sequence[ConsumeStatus]:
    """A bulk delivery: one ``process {topic}`` (CONSUMER) span for the batch, a trace of its own that
    links to each message's trace context (OpenTelemetry's rule for batches), around one ``deliver``
    span for the POST; ``deliver`` answers a status per message."""
    links = _links(m.user_properties for m in msgs)
    topic = msgs[0].topic if msgs else ""
    attrs = _consumer_attributes(topic, group)
    attrs["messaging.batch.message_count"] = len(msgs)
    root = trace.set_span_in_context(trace.INVALID_SPAN)
    span = _tracer.start_span(f"process {topic}", root, SpanKind.CONSUMER, attrs, links)
    with _Current(span):
        return await _delivered(topic, endpoint, deliver)
