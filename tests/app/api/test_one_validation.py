"""Issue 12, item 6: one validation for both APIs. The same inputs, sent through HTTP and through gRPC,
are refused with the same status, field and reason (each API spelling the field its own way), and the
same valid inputs succeed with the same status."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields
from typing import Any

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.request import GRPC_FIELDS, HTTP_FIELDS
from rocksidecar.rmq.message import TOPIC_MAX_LEN
from tests.app.conftest import Stack

MAX_BODY = 64
MAX_DELAY = 3_600_000
BATCH_LIMIT = 3
FAR = 10**13  # epoch ms far beyond now + MAX_DELAY


@dataclass(frozen=True)
class Case:
    """One message as HTTP JSON and the same message as gRPC's Message."""

    name: str
    http: dict[str, Any]
    grpc: dict[str, Any] = field(default_factory=dict)  # pb.Message fields; default: the same as http

    def message(self) -> pb.Message:
        return pb.Message(**(self.grpc or self.http))


INVALID = [
    Case("topic with a space", {"topic": "bad topic", "body": "x"}),
    Case("topic too long", {"topic": "T" * (TOPIC_MAX_LEN + 1), "body": "x"}),
    Case("default topic", {"topic": "TBW102", "body": "x"}),
    Case("system topic", {"topic": "rmq_sys_x", "body": "x"}),
    Case("no body", {"topic": "T"}),
    Case("empty body", {"topic": "T", "body": ""}),
    Case(
        "body too large",
        {"topic": "T", "bodyBase64": base64.b64encode(b"\x01" * (MAX_BODY + 1)).decode()},
        {"topic": "T", "body_bytes": b"\x01" * (MAX_BODY + 1)},
    ),
    Case("text body too large", {"topic": "T", "body": "x" * (MAX_BODY + 1)}),
    Case("reserved property", {"topic": "T", "body": "x", "properties": {"TAGS": "x"}}),
    Case("separator in a property", {"topic": "T", "body": "x", "properties": {"p": "a\x01b"}}),
    Case("empty property name", {"topic": "T", "body": "x", "properties": {"": "v"}}),
    Case("key with white space", {"topic": "T", "body": "x", "keys": ["a b"]}),
    Case("empty key", {"topic": "T", "body": "x", "keys": ["ok", ""]}),
    Case("separator in tags", {"topic": "T", "body": "x", "tags": "a\x02b"}),
    Case(
        "empty sharding key",
        {"topic": "T", "body": "x", "shardingKey": ""},
        {"topic": "T", "body": "x", "sharding_key": ""},
    ),
    Case("type with a colon", {"topic": "T", "body": "x", "type": "a:b"}),
    Case("type too long", {"topic": "T", "body": "x", "type": "t" * 129}),
    Case(
        "negative delay",
        {"topic": "T", "body": "x", "delayMs": -5},
        {"topic": "T", "body": "x", "delay_ms": -5},
    ),
    Case(
        "delay over the maximum",
        {"topic": "T", "body": "x", "delayMs": MAX_DELAY + 1},
        {"topic": "T", "body": "x", "delay_ms": MAX_DELAY + 1},
    ),
    Case(
        "deliver at no time",
        {"topic": "T", "body": "x", "deliverAt": "tomorrow"},
        {"topic": "T", "body": "x", "deliver_at": "tomorrow"},
    ),
    Case(
        "deliver at without an offset",
        {"topic": "T", "body": "x", "deliverAt": "2026-01-01T00:00:00"},
        {"topic": "T", "body": "x", "deliver_at": "2026-01-01T00:00:00"},
    ),
    Case(
        "deliver at too far ahead",
        {"topic": "T", "body": "x", "deliverAt": FAR},
        {"topic": "T", "body": "x", "deliver_at_ms": FAR},
    ),
    Case(
        "deliver at out of range",
        {"topic": "T", "body": "x", "deliverAt": 10**16},
        {"topic": "T", "body": "x", "deliver_at_ms": 10**16},
    ),
]

VALID = [
    Case("text", {"topic": "V", "body": "hello"}),
    Case(
        "bytes with everything",
        {
            "topic": "V",
            "bodyBase64": base64.b64encode(b"\x00\xff" * (MAX_BODY // 2)).decode(),
            "tags": "t",
            "keys": ["k1", "k2"],
            "properties": {"p": "v"},
            "shardingKey": "s",
            "type": "orders",
        },
        {
            "topic": "V",
            "body_bytes": b"\x00\xff" * (MAX_BODY // 2),
            "tags": "t",
            "keys": ["k1", "k2"],
            "properties": {"p": "v"},
            "sharding_key": "s",
            "type": "orders",
        },
    ),
    Case("no delay", {"topic": "V", "body": "x", "delayMs": 0}, {"topic": "V", "body": "x", "delay_ms": 0}),
    Case(
        "delay",
        {"topic": "V", "body": "x", "delayMs": 60_000},
        {"topic": "V", "body": "x", "delay_ms": 60_000},
    ),
    Case(
        "deliver at in the past",
        {"topic": "V", "body": "x", "deliverAt": "2020-01-01T00:00:00Z"},
        {"topic": "V", "body": "x", "deliver_at": "2020-01-01T00:00:00Z"},
    ),
    Case(
        "deliver at the maximum",
        {"topic": "V", "body": "x", "delayMs": MAX_DELAY},
        {"topic": "V", "body": "x", "delay_ms": MAX_DELAY},
    ),
]


def as_grpc(http_text: str) -> str:
    """An HTTP field path or reason with the field names gRPC spells otherwise."""
    for f in fields(HTTP_FIELDS):
        http_text = http_text.replace(getattr(HTTP_FIELDS, f.name), getattr(GRPC_FIELDS, f.name))
    return http_text


@pytest.fixture
async def edges(make_stack: Any) -> AsyncIterator[tuple[Stack, pb_grpc.SidecarStub]]:
    async with (
        make_stack(max_body_bytes=MAX_BODY, max_delay_ms=MAX_DELAY, batch_limit=BATCH_LIMIT) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel,
    ):
        yield stack, pb_grpc.SidecarStub(channel)


async def _grpc_refusal(call: Any) -> tuple[int, str, str]:
    """(HTTP status, field, reason) of a refused gRPC call, which must be INVALID_ARGUMENT."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
    meta = dict(info.value.trailing_metadata() or ())
    return int(meta["http-status"]), str(meta["field"]), info.value.details() or ""


async def test_the_same_invalid_message_is_refused_alike(edges: tuple[Stack, pb_grpc.SidecarStub]) -> None:
    stack, stub = edges
    for case in INVALID:
        r = await stack.http.post("/v1/messages", json=case.http)
        assert 400 <= r.status_code < 500, (case.name, r.text)
        problem = r.json()
        got = await _grpc_refusal(stub.Send(pb.SendRequest(message=case.message())))
        want = (r.status_code, as_grpc(problem["field"]), as_grpc(problem["detail"]))
        assert got == want, case.name
        assert problem["field"], case.name  # every refusal names the field
    assert stack.service.retry.stats().pending == 0 and not stack.stored("T")


async def test_the_same_invalid_item_of_a_batch_is_refused_alike(
    edges: tuple[Stack, pb_grpc.SidecarStub],
) -> None:
    stack, stub = edges
    for case in INVALID:
        r = await stack.http.post(
            "/v1/messages:batch", json={"messages": [{"topic": "V", "body": "x"}, case.http]}
        )
        assert r.status_code == 200, (case.name, r.text)
        item = r.json()["results"][1]
        answer = await stub.SendBatch(
            pb.SendBatchRequest(messages=[pb.Message(topic="V", body="x"), case.message()])
        )
        error = answer.results[1].error
        assert item["status"] == "REJECTED" and answer.results[1].HasField("error"), case.name
        got = (error.http_status, error.field, error.detail)
        want = (item["error"]["status"], as_grpc(item["error"]["field"]), as_grpc(item["error"]["detail"]))
        assert got == want, case.name
        assert got[1].startswith("messages[1]."), case.name


async def test_the_same_invalid_request_is_refused_alike(edges: tuple[Stack, pb_grpc.SidecarStub]) -> None:
    stack, stub = edges
    too_many = [{"topic": "V", "body": "x"}] * (BATCH_LIMIT + 1)
    requests = [
        ("empty batch", {"messages": []}, pb.SendBatchRequest(), {}),
        (
            "batch over the limit",
            {"messages": too_many},
            pb.SendBatchRequest(messages=[pb.Message(**m) for m in too_many]),
            {},
        ),
        (
            "idempotency key too long",
            {"messages": [{"topic": "V", "body": "x"}]},
            pb.SendBatchRequest(messages=[pb.Message(topic="V", body="x")], idempotency_key="k" * 256),
            {"Idempotency-Key": "k" * 256},
        ),
    ]
    for name, http_body, grpc_request, headers in requests:
        r = await stack.http.post("/v1/messages:batch", json=http_body, headers=headers)
        assert 400 <= r.status_code < 500, (name, r.text)
        problem = r.json()
        got = await _grpc_refusal(stub.SendBatch(grpc_request))
        assert got == (r.status_code, as_grpc(problem["field"]), as_grpc(problem["detail"])), name
    assert not stack.stored("V")


async def test_the_same_valid_message_succeeds_alike(edges: tuple[Stack, pb_grpc.SidecarStub]) -> None:
    stack, stub = edges
    sent = 0
    for case in VALID:
        r = await stack.http.post("/v1/messages", json=case.http)
        assert r.status_code in (200, 202), (case.name, r.text)
        answer = await stub.Send(pb.SendRequest(message=case.message()))
        assert answer.status == pb.Status.Value(r.json()["status"]), case.name
        assert answer.id and answer.id != r.json()["id"], case.name
        sent += r.status_code == 200
    assert sent == 4  # text, bytes, no delay, a past due time; the other two are SCHEDULED
    assert len(stack.stored("V")) == 2 * sent
