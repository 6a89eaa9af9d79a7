"""W3C Trace Context (https://www.w3.org/TR/trace-context/) as message properties.

The ``traceparent`` is stored under ``TRACE_CONTEXT``: the property RocketMQ's proxy writes the gRPC
clients' ``SystemProperties.trace_context`` into (``MessageConst.PROPERTY_TRACE_CONTEXT``; the
OpenTelemetry-enabled clients of apache/rocketmq-clients put a W3C traceparent there), so a 5.x consumer
behind a proxy sees the same trace. RocketMQ has no name for ``tracestate``: it goes under
``TRACE_STATE``.

A trace context that does not parse is ignored, never refused: the W3C rule ("the vendor MUST ignore the
traceparent") and the sidecar's promise agree that a broken header must not lose a message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from typing import NamedTuple

from rocksidecar.rmq import Message

TRACEPARENT_PROPERTY = "TRACE_CONTEXT"
TRACESTATE_PROPERTY = "TRACE_STATE"
MAX_TRACESTATE_CHARS = 512  # the spec lets vendors truncate beyond 512; refusing is simpler and safe
MAX_TRACESTATE_MEMBERS = 32

# version 00 exactly; a later version may append fields after a '-' (the spec's forward compatibility)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
# What nearly every valid header is: version 00, already normalised. Taken as it is, without the groups and
# the rebuilt string of the general parse (every request with a traceparent pays this, tracing on or off).
_NORMAL = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}").fullmatch
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_KEY = re.compile(r"([a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})")
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


class TraceContext(NamedTuple):
    """Immutable; a NamedTuple rather than a frozen dataclass: built per request, at a third of the cost."""

    traceparent: str  # valid, as version 00
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        return self.traceparent[3:35]

    @property
    def span_id(self) -> str:
        return self.traceparent[36:52]

    @property
    def sampled(self) -> bool:
        return bool(int(self.traceparent[53:55], 16) & 1)


def parse_traceparent(value: str | None) -> str | None:
    """``value`` as a version-00 traceparent, or None when it is not a valid one."""
    if value is None or len(value) > 256:
        return None
    if len(value) == 55 and _NORMAL(value) is not None:
        return value if value[3:35] != _ZERO_TRACE and value[36:52] != _ZERO_SPAN else None
    text = value.strip(" \t")
    m = _TRACEPARENT.fullmatch(text)
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    if version == "00" and rest is not None:
        return None  # version 00 has exactly four fields
    return f"00-{trace_id}-{span_id}-{flags}"


def parse_tracestate(value: str | None) -> str | None:
    """``value`` as a tracestate list (empty members dropped), or None when any member is malformed,
    keys repeat, or it is too long: a broken tracestate is dropped whole, as the spec allows."""
    if not value or len(value) > MAX_TRACESTATE_CHARS:
        return None
    members: list[str] = []
    keys: set[str] = set()
    for part in value.split(","):
        member = part.strip(" \t")
        if not member:
            continue
        key, eq, val = member.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(val) or key in keys:
            return None
        keys.add(key)
        members.append(member)
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    return ",".join(members)


def from_headers(traceparent: str | None, tracestate: str | None) -> TraceContext | None:
    """The trace context of a request; a tracestate without a valid traceparent means nothing."""
    parent = parse_traceparent(traceparent)
    if parent is None:
        return None
    return TraceContext(parent, parse_tracestate(tracestate))


def of_properties(properties: Mapping[str, str]) -> TraceContext | None:
    """The trace context a message carries in its properties, if a valid one."""
    return from_headers(properties.get(TRACEPARENT_PROPERTY), properties.get(TRACESTATE_PROPERTY))


def clean(properties: MutableMapping[str, str]) -> None:
    """Keep the trace properties a message was given only when they are valid (normalised); drop them
    otherwise, so that what the sidecar stores and delivers under these names always parses."""
    ctx = of_properties(properties)
    properties.pop(TRACEPARENT_PROPERTY, None)
    properties.pop(TRACESTATE_PROPERTY, None)
    if ctx is not None:
        put(properties, ctx)


def put(properties: MutableMapping[str, str], ctx: TraceContext) -> None:
    properties[TRACEPARENT_PROPERTY] = ctx.traceparent
    if ctx.tracestate is not None:
        properties[TRACESTATE_PROPERTY] = ctx.tracestate


def inherit(msg: Message, ctx: TraceContext) -> Message:
    """``msg`` with the request's trace context, unless it carries its own (a Spark row's column)."""
    if TRACEPARENT_PROPERTY in msg.properties:
        return msg
    properties = dict(msg.properties)
    put(properties, ctx)
    # positional, not dataclasses.replace (a tenth of its cost): every request with a traceparent pays it
    return Message(msg.topic, msg.body, msg.tags, msg.keys, properties, msg.flag, msg.id)


def trace_fields(properties: Mapping[str, str]) -> dict[str, str]:
    """``{"trace_id": ...}`` for a log line about a message that carries a trace context, else ``{}``."""
    parent = parse_traceparent(properties.get(TRACEPARENT_PROPERTY))
    return {} if parent is None else {"trace_id": parent[3:35]}
