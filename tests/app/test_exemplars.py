"""Latency metrics carry exemplars: the trace of a message (sampled, valid) beside the bucket its latency
fell in, at most one a bucket and series a second, shown in OpenMetrics when the scraper asks for it
(app.exemplars, app.metrics)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from rocksidecar.app import metrics
from rocksidecar.app.exemplars import MAX_SERIES, Exemplars
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY
from rocksidecar.rmq import Message
from tests.app.conftest import Stack
from tests.fakes import FakeClock

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
SAMPLED = f"00-{TRACE}-{SPAN}-01"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def test_one_exemplar_a_bucket_and_series_a_second() -> None:
    clock = FakeClock()
    gate = Exemplars((0.01, 0.1), clock=clock)
    assert gate.take("", 0.005, SAMPLED) == {"trace_id": TRACE, "span_id": SPAN}
    assert gate.take("", 0.007, SAMPLED) is None  # same bucket, same second
    assert gate.take("", 0.05, SAMPLED) is not None  # another bucket
    assert gate.take("other", 0.005, SAMPLED) is not None  # another series
    clock.now += 0.999
    assert gate.take("", 0.005, SAMPLED) is None
    clock.now += 0.001
    assert gate.take("", 0.005, SAMPLED) is not None  # a second later


@pytest.mark.parametrize(
    "traceparent",
    [
        None,
        SAMPLED[:-2] + "00",  # not sampled: recorded nowhere, nothing to link to
        "",
        "garbage",
        SAMPLED.upper(),
        f"00-{'0' * 32}-{SPAN}-01",
        f"ff-{TRACE}-{SPAN}-01",
        SAMPLED + "-x",
        "00-" + "a" * 300,
        SAMPLED + '\n# {trace_id="x"}',  # an injection attempt from a producer's property
    ],
)
def test_no_exemplar_without_a_valid_sampled_trace(traceparent: str | None) -> None:
    gate = Exemplars((0.01,), clock=FakeClock())
    assert gate.take("", 0.005, traceparent) is None
    assert gate.take("", 0.005, SAMPLED) is not None  # the refusal did not use the bucket's turn


def test_the_gate_is_bounded() -> None:
    gate = Exemplars((), clock=FakeClock())  # one bucket a series
    for i in range(MAX_SERIES):
        assert gate.take(f"s{i}", 1.0, SAMPLED) is not None
    assert gate.take("one too many", 1.0, SAMPLED) is None
    assert gate.take("s0", 1.0, SAMPLED) is None  # known series keep their rule


def _exemplars(text: str, name: str) -> dict[str, str]:
    """le -> the trace id of the exemplar on that bucket of ``name`` (OpenMetrics text)."""
    pattern = rf'{name}_bucket\{{le="([^"]+)"[^}}]*\}} \S+ # \{{span_id="(\w+)",trace_id="(\w+)"\}}'
    found = re.findall(pattern, text)
    return {le: trace for le, _span, trace in found}


def test_the_send_latency_takes_its_messages_trace() -> None:
    clock = FakeClock()
    m = metrics.Metrics(clock=clock)
    traced = Message("T", b"x", properties={TRACEPARENT_PROPERTY: SAMPLED})
    m.observe_send(0.003, traced)
    m.observe_send(0.004, traced)  # same bucket, same second: counted, no new exemplar
    m.observe_send(0.3, Message("T", b"x"))  # no trace context
    m.observe_send(0.3, None)  # a failure before any message
    text = openmetrics(m.registry).decode()
    assert _exemplars(text, "rocksidecar_send_latency_seconds") == {"0.005": TRACE}
    assert m.registry.get_sample_value("rocksidecar_send_latency_seconds_count") == 4
    body, content_type = metrics.exposition(m.registry, None)  # the classic format: no exemplars
    assert content_type.startswith("text/plain") and b"trace_id" not in body
    body, content_type = metrics.exposition(m.registry, OPENMETRICS)
    assert content_type.startswith("application/openmetrics-text") and TRACE.encode() in body


def test_the_delivery_tally_shows_exemplars_as_a_histogram_does() -> None:
    """Its OpenMetrics text is the Histogram's it replaces, exemplars included (their timestamps aside)."""
    clock = FakeClock()
    old = CollectorRegistry()
    histogram = Histogram(
        "rocksidecar_subscription_delivery_seconds", "L.", ["subscription"], buckets=metrics.LATENCY_BUCKETS,
        registry=old,
    )  # fmt: skip
    new = CollectorRegistry()
    tally = metrics.DeliveryTally(
        "rocksidecar_subscription_deliveries", "D.", "rocksidecar_subscription_delivery_seconds", "L.",
        metrics.LATENCY_BUCKETS, clock=clock,
    )  # fmt: skip
    new.register(tally)
    gate = Exemplars(metrics.LATENCY_BUCKETS, clock=clock)  # the same rule, for the Histogram
    other = f"00-{'1' * 32}-{SPAN}-01"
    for sub, s, trace in [("orders", 0.002, SAMPLED), ("orders", 0.0021, other), ("audit", 0.3, other),
                          ("orders", 0.3, None), ("audit", 7.0, SAMPLED[:-2] + "00")]:  # fmt: skip
        tally.observe(sub, "ok", s, trace)
        histogram.labels(sub).observe(s, gate.take(sub, s, trace))

    def latency_lines(registry: CollectorRegistry) -> list[str]:
        """The histogram's samples in OpenMetrics, each exemplar's timestamp left out."""
        text = openmetrics(registry).decode()
        return [
            re.sub(r"(# \{[^}]*\} \S+) \S+", r"\1", line)
            for line in text.splitlines()
            if line.startswith("rocksidecar_subscription_delivery_seconds")
        ]

    assert latency_lines(new) == latency_lines(old)
    found = _exemplars(openmetrics(new).decode(), "rocksidecar_subscription_delivery_seconds")
    assert found == {"0.0025": TRACE, "0.5": "1" * 32}


async def test_a_traced_request_leaves_an_exemplar_on_the_send_latency(stack: Stack) -> None:
    r = await stack.http.post(
        "/v1/messages", json={"topic": "Ex", "body": "x"}, headers={"traceparent": SAMPLED}
    )
    assert r.status_code == 200, r.text
    text = (await stack.http.get("/metrics", headers={"accept": OPENMETRICS})).text
    assert TRACE in _exemplars(text, "rocksidecar_send_latency_seconds").values()
    assert "trace_id" not in (await stack.http.get("/metrics")).text


async def test_a_traced_delayed_message_leaves_an_exemplar_on_the_lateness(stack: Stack) -> None:
    r = await stack.http.post(
        "/v1/messages", json={"topic": "ExD", "body": "x", "delayMs": 50}, headers={"traceparent": SAMPLED}
    )
    assert r.status_code == 202, r.text
    await stack.until_published(r.json()["deliverAt"])
    text = (await stack.http.get("/metrics", headers={"accept": OPENMETRICS})).text
    assert TRACE in _exemplars(text, "rocksidecar_delay_lateness_seconds").values()


@pytest.mark.parametrize(
    "accept",
    [
        "application/openmetrics-text; version=abc",
        "application/openmetrics-text; version=1.x",
        "x" * 4000,
        "",
    ],
)
def test_an_accept_header_it_cannot_read_gets_the_classic_format(accept: str) -> None:
    """prometheus_client's negotiation raised on a version that is not a number: a 500 for a client's
    header. The classic format answers instead."""
    m = metrics.Metrics()
    m.observe_send(0.003, Message("T", b"x", properties={TRACEPARENT_PROPERTY: SAMPLED}))
    body, content_type = metrics.exposition(m.registry, accept)
    assert content_type.startswith("text/plain") and b"rocksidecar_send_latency_seconds_bucket" in body


async def test_metrics_answers_a_bad_accept_header(stack: Stack) -> None:
    r = await stack.http.get("/metrics", headers={"accept": "application/openmetrics-text; version=abc"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
