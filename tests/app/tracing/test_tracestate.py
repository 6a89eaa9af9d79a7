"""app.tracing.tracestate: a tracestate the sidecar takes (W3C Level 2: a key may start with a digit) made
into OpenTelemetry-Python's TraceState without its warning per request or delivery; what OpenTelemetry
refuses left out and counted, what it takes kept on the span."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import span as otel_span

from rocksidecar.app.http_client import Answer
from rocksidecar.app.tracing import tracestate
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY, parse_tracestate
from rocksidecar.rmq.consumer.config import ConsumeStatus
from tests.app.conftest import Stack
from tests.app.subscriptions.test_push import MQ, Recorded, message

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_digit_key_tracestate_logs_nothing_per_request_and_is_passed_on(
    stack: Stack, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    headers = {"traceparent": TP, "tracestate": "1vendor=x,rojo=00f067aa0ba902b7"}
    for _ in range(3):
        r = await stack.http.post("/v1/messages", json={"topic": "TrDigit", "body": "x"}, headers=headers)
        assert r.status_code == 200
    assert _warnings(caplog) == []  # before: "Member doesn't match the w3c identifiers format" each
    stored = {m.properties.get(TRACESTATE_PROPERTY) for m in stack.stored("TrDigit")}
    assert stored == {"1vendor=x,rojo=00f067aa0ba902b7"}  # the message keeps it whole
    receives = [s for s in exporter.get_finished_spans() if s.name == "receive TrDigit"]
    assert len(receives) == 3
    for span in receives:  # the member OpenTelemetry takes stays on the span (before: none did)
        assert span.parent is not None and dict(span.parent.trace_state) == {"rojo": "00f067aa0ba902b7"}


async def test_a_digit_key_tracestate_logs_nothing_per_delivery(
    exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    rec = Recorded([Answer(200)] * 2)
    props = {TRACEPARENT_PROPERTY: TP, TRACESTATE_PROPERTY: "9x=1"}  # a producer's TRACE_STATE
    for _ in range(2):
        assert await rec.push()([message(**props)], MQ) is ConsumeStatus.SUCCESS
    assert _warnings(caplog) == []
    assert [s.name for s in exporter.get_finished_spans()].count("process T") == 2


def test_only_what_opentelemetry_takes_is_kept_and_the_rest_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    before = tracestate.dropped_members
    state = tracestate.trace_state("1a=x, b=y,,c@d=z,5=v,b=again,bad,e=")
    assert dict(state) == {"b": "y", "c@d": "z"}
    assert tracestate.dropped_members - before == 5  # 1a, 5, the second b, bad, e= (an empty value)
    many = ",".join(f"k{i}=v" for i in range(40))  # more than OpenTelemetry's 32 (context refuses it)
    assert len(tracestate.trace_state(many)) == 32
    assert dict(tracestate.trace_state("7=1,8=2")) == {}
    assert _warnings(caplog) == []


def test_a_tracestate_is_parsed_once_and_the_kept_ones_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracestate, "_STATES", {})
    monkeypatch.setattr(tracestate, "MAX_STATES", 4)
    first = tracestate.trace_state("2a=x,b=y")
    counted = tracestate.dropped_members
    assert tracestate.trace_state("2a=x,b=y") is first and tracestate.dropped_members == counted
    for i in range(10):  # distinct hostile ones: the cache starts again rather than growing
        tracestate.trace_state(f"k={i}")
        assert len(tracestate._STATES) <= 4
    long = "a=" + "v" * 255 + "," + ",".join(f"k{i}=" + "v" * 20 for i in range(12))
    assert len(long) > tracestate.MAX_CHARS and len(tracestate.trace_state(long)) == 13
    assert long not in tracestate._STATES  # what context refuses is never kept


@pytest.mark.parametrize(
    "key",
    ["a", "1a", "0", "a@b", "1a@b", "a@1", "A", "a_-*/0", "a" * 256, "a" * 257, "1" * 241 + "@a",
     "1" * 242 + "@a", "a@" + "b" * 14, "a@" + "b" * 15, "a b", "a@b@c", ""],
)  # fmt: skip
def test_the_key_rule_is_opentelemetry_s(key: str) -> None:
    """The restated rule agrees with the installed OpenTelemetry's (its private pattern, read here only):
    a key it refused would make TraceState log again."""
    assert (tracestate._KEY(key) is not None) == (otel_span._KEY_PATTERN.fullmatch(key) is not None)


@pytest.mark.parametrize("value", ["x", " x", "x ", "a,b", "a=b", "\x7e", "\x7f", "v" * 256, "v" * 257, ""])
def test_the_value_rule_is_opentelemetry_s(value: str) -> None:
    assert (tracestate._VALUE(value) is not None) == (otel_span._VALUE_PATTERN.fullmatch(value) is not None)


def test_every_tracestate_the_sidecar_takes_makes_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    for header in ("1vendor=x", "a=1,2b@c=3", "1tenant@vendor=x", "x@y=z,0=0"):
        kept = parse_tracestate(header)
        assert kept is not None  # W3C Level 2 takes it (app.tracing.context)
        tracestate.trace_state(kept)
    assert _warnings(caplog) == []
