"""A W3C ``tracestate`` as OpenTelemetry-Python's TraceState, without its warnings.

The sidecar keeps what W3C Trace Context Level 2 allows (app.tracing.context: a key may start with a
digit), but OpenTelemetry-Python's key rule is Level 1's: ``TraceState.from_header`` logs a WARNING for
such a member and drops the whole list. Any client (a header) or producer (the ``TRACE_STATE`` property)
could then have a warning logged for every sampled request or delivery, and the span lose its tracestate.
Here each member is checked against OpenTelemetry's own rules first: those it takes make the TraceState
(built from pairs it accepts, so it logs nothing), the others are left out silently and counted.
"""

from __future__ import annotations

import re

from opentelemetry.trace import TraceState

from ..bounded import remember

# OpenTelemetry-Python's rules (opentelemetry.trace.span _KEY_FORMAT, _VALUE_FORMAT, the most keys),
# restated: a pair that breaks them is what makes TraceState log. tests/app/tracing/test_tracestate.py
# checks they still agree with the installed version's.
_KEY = re.compile(
    r"[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}"
).fullmatch
_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]").fullmatch
MAX_MEMBERS = 32
MAX_CHARS = 512  # longer ones (not from app.tracing.context, which refuses them) are parsed, not kept
MAX_STATES = 1024  # distinct tracestates kept: a request's is usually one of a few
_STATES: dict[str, TraceState] = {}

dropped_members = 0  # members left out because OpenTelemetry refuses them, once per tracestate parsed


def trace_state(header: str) -> TraceState:
    """``header``'s members that OpenTelemetry takes, as a TraceState (empty when none). Kept per
    string: a sampled request or delivery pays one dict read, not a parse (cheaper than from_header)."""
    state = _STATES.get(header)
    if state is None:
        state = _parse(header)
        if len(header) <= MAX_CHARS:
            remember(_STATES, header, state, MAX_STATES)
    return state


def _parse(header: str) -> TraceState:
    global dropped_members
    pairs: dict[str, str] = {}
    for part in header.split(","):
        member = part.strip(" \t")
        if not member:  # an empty member is valid and means nothing
            continue
        key, eq, value = member.partition("=")
        if eq and _KEY(key) and _VALUE(value) and key not in pairs and len(pairs) < MAX_MEMBERS:
            pairs[key] = value
        else:
            dropped_members += 1
    return TraceState(list(pairs.items()))
