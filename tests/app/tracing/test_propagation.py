"""A request's W3C trace context travels with its message: stored as TRACE_CONTEXT / TRACE_STATE on a
direct send, a batch, a spooled-then-replayed send, a delayed send and a gRPC send; a bad header is
ignored (the message is sent without one), never refused."""

from __future__ import annotations

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY
from tests.app.conftest import Stack

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
HEADERS = {"traceparent": TP, "tracestate": "rojo=00f067aa0ba902b7"}


def trace_of(stack: Stack, topic: str) -> list[tuple[str | None, str | None]]:
    return [
        (m.properties.get(TRACEPARENT_PROPERTY), m.properties.get(TRACESTATE_PROPERTY))
        for m in stack.stored(topic)
    ]


async def test_a_send_stores_the_trace_context_as_properties(stack: Stack) -> None:
    r = await stack.http.post("/v1/messages", json={"topic": "TrSend", "body": "x"}, headers=HEADERS)
    assert r.status_code == 200
    assert trace_of(stack, "TrSend") == [(TP, "rojo=00f067aa0ba902b7")]


async def test_a_bad_traceparent_is_ignored_not_refused(stack: Stack) -> None:
    bad = {"traceparent": "00-nothex-b7ad6b7169203331-01", "tracestate": "a=b"}
    r = await stack.http.post("/v1/messages", json={"topic": "TrBad", "body": "x"}, headers=bad)
    assert r.status_code == 200
    assert trace_of(stack, "TrBad") == [(None, None)]


async def test_without_a_header_a_valid_property_is_kept_and_a_bad_one_dropped(stack: Stack) -> None:
    msgs = [
        {"topic": "TrRow", "body": "own", "properties": {TRACEPARENT_PROPERTY: TP}},
        {"topic": "TrRow", "body": "bad", "properties": {TRACEPARENT_PROPERTY: "x", "k": "v"}},
    ]
    r = await stack.http.post("/v1/messages:batch", json={"messages": msgs})
    assert [x["status"] for x in r.json()["results"]] == ["SENT", "SENT"]
    got = {m.body: m.properties.get(TRACEPARENT_PROPERTY) for m in stack.stored("TrRow")}
    assert got == {b"own": TP, b"bad": None}


async def test_a_batch_gives_the_header_to_items_without_their_own(stack: Stack) -> None:
    own = "00-11111111111111111111111111111111-2222222222222222-00"
    msgs = [
        {"topic": "TrBatch", "body": "a"},
        {"topic": "TrBatch", "body": "b", "properties": {TRACEPARENT_PROPERTY: own}},
    ]
    r = await stack.http.post("/v1/messages:batch", json={"messages": msgs}, headers=HEADERS)
    assert r.status_code == 200
    got = {m.body: m.properties.get(TRACEPARENT_PROPERTY) for m in stack.stored("TrBatch")}
    assert got == {b"a": TP, b"b": own}


async def test_a_spooled_then_replayed_send_keeps_the_trace_context(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    await stack.http.post("/v1/messages", json={"topic": "TrSpool", "body": "warm"})
    await stack.stop_brokers()
    r = await stack.http.post("/v1/messages", json={"topic": "TrSpool", "body": "x"}, headers=HEADERS)
    assert r.status_code == 202 and r.json()["status"] == "SPOOLED"
    (spooled,) = [rec for rec in caplog.records if getattr(rec, "event", None) == "message_spooled"]
    assert getattr(spooled, "trace_id", None) == TP[3:35]  # the log line names the request's trace
    await stack.start_brokers()
    await stack.drain()
    got = {m.body: m.properties.get(TRACEPARENT_PROPERTY) for m in stack.stored("TrSpool")}
    assert got == {b"warm": None, b"x": TP}


async def test_a_delayed_send_keeps_the_trace_context(stack: Stack) -> None:
    r = await stack.http.post(
        "/v1/messages", json={"topic": "TrLater", "body": "x", "delayMs": 100}, headers=HEADERS
    )
    assert r.json()["status"] == "SCHEDULED"
    await stack.until_published(r.json()["deliverAt"])
    assert trace_of(stack, "TrLater") == [(TP, "rojo=00f067aa0ba902b7")]


async def test_grpc_metadata_carries_the_trace_context(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch:
        stub = pb_grpc.SidecarStub(ch)
        msg = pb.Message(topic="TrGrpc", body="x")
        await stub.Send(pb.SendRequest(message=msg), metadata=(("traceparent", TP),))
        await stub.SendBatch(pb.SendBatchRequest(messages=[msg]), metadata=(("traceparent", TP),))
    assert trace_of(stack, "TrGrpc") == [(TP, None), (TP, None)]
