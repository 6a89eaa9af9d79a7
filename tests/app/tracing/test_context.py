"""W3C trace context parsing: strict, and a bad value is ignored (None), never an error."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocksidecar.app.tracing.context import (
    TRACEPARENT_PROPERTY,
    TRACESTATE_PROPERTY,
    TraceContext,
    clean,
    from_headers,
    inherit,
    parse_traceparent,
    parse_tracestate,
)
from rocksidecar.rmq import Message

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_valid_traceparent_is_kept_and_split() -> None:
    ctx = from_headers(f" {TP}\t", "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE")
    assert ctx == TraceContext(TP, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert ctx.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert ctx.span_id == "b7ad6b7169203331" and ctx.sampled


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
        TP + "-extra",  # version 00 has four fields
        "0-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333\x01-01",
        TP + "x" * 300,
    ],
)
def test_a_bad_traceparent_is_ignored(bad: str) -> None:
    assert parse_traceparent(bad) is None
    assert from_headers(bad, "a=b") is None  # a tracestate means nothing without a parent


def test_a_later_version_is_read_as_version_00() -> None:
    later = "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-adds"
    assert parse_traceparent(later) == TP


@pytest.mark.parametrize(
    "bad", ["a", "a=b,a=c", "A=b", "a=b\x01", "a=" + "x" * 257, ",".join(f"k{i}=v" for i in range(33))]
)
def test_a_bad_tracestate_is_dropped_whole(bad: str) -> None:
    assert parse_tracestate(bad) is None
    assert from_headers(TP, bad) == TraceContext(TP, None)


def test_tracestate_members_may_have_tenant_keys_and_empty_entries() -> None:
    assert parse_tracestate("t@vendor=x, ,b=y") == "t@vendor=x,b=y"


def test_clean_keeps_valid_trace_properties_normalised_and_drops_invalid() -> None:
    good = {TRACEPARENT_PROPERTY: f" {TP} ", TRACESTATE_PROPERTY: "a=b", "x": "y"}
    clean(good)
    assert good == {TRACEPARENT_PROPERTY: TP, TRACESTATE_PROPERTY: "a=b", "x": "y"}
    bad = {TRACEPARENT_PROPERTY: "nonsense", TRACESTATE_PROPERTY: "a=b", "x": "y"}
    clean(bad)
    assert bad == {"x": "y"}


def test_a_message_keeps_its_own_trace_context_over_the_requests() -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-00"
    own = Message("T", b"x", properties={TRACEPARENT_PROPERTY: other})
    assert inherit(own, TraceContext(TP)) is own
    plain = Message("T", b"x", properties={"k": "v"})
    got = inherit(plain, TraceContext(TP, "a=b"))
    assert got.properties == {"k": "v", TRACEPARENT_PROPERTY: TP, TRACESTATE_PROPERTY: "a=b"}
    assert plain.properties == {"k": "v"}  # the original is not changed


def test_log_fields_name_the_message_s_trace_id() -> None:
    from rocksidecar.app.tracing.context import trace_fields

    assert trace_fields({TRACEPARENT_PROPERTY: TP}) == {"trace_id": "0af7651916cd43dd8448eb211c80319c"}
    assert trace_fields({TRACEPARENT_PROPERTY: "junk"}) == {} and trace_fields({}) == {}


def _general_parse(text: str) -> str | None:
    """The general parse alone (the regex with groups), which the 55-character fast path must agree with."""
    import re

    m = re.fullmatch(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", text.strip(" \t"))
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16 or (version == "00" and rest):
        return None
    return f"00-{trace_id}-{span_id}-{flags}"


@settings(max_examples=300)
@given(st.text(alphabet="0123456789abcdefABF- \t", min_size=53, max_size=57))
@example("00-00000000000000000000000000000000-b7ad6b7169203331-01")
@example("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01")
@example("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
@example("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0A")
def test_the_fast_path_agrees_with_the_general_parse(text: str) -> None:
    assert parse_traceparent(text) == _general_parse(text)


@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.integers(0, 255))
def test_every_valid_version_00_traceparent_is_kept_as_it_is(trace_id: int, span_id: int, flags: int) -> None:
    tp = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    assert parse_traceparent(tp) == tp
