"""Bad input: a 4xx problem+json naming the field, and nothing stored or sent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.app.conftest import Stack

BAD: list[tuple[Any, int, str | None]] = [
    ({"topic": "bad topic", "body": "x"}, 400, "topic"),
    ({"topic": "T" * 128, "body": "x"}, 400, "topic"),
    ({"topic": "TBW102", "body": "x"}, 400, "topic"),
    ({"body": "x"}, 400, "topic"),
    ({"topic": "T"}, 400, "body"),
    ({"topic": "T", "body": "x", "bodyBase64": "eA=="}, 400, "body"),
    ({"topic": "T", "body": ""}, 400, "body"),
    ({"topic": "T", "bodyBase64": "not base64!"}, 400, "bodyBase64"),
    ({"topic": "T", "body": "x", "properties": {"UNIQ_KEY": "mine"}}, 400, "properties.UNIQ_KEY"),
    ({"topic": "T", "body": "x", "properties": {"p": "a\u0001b"}}, 400, "properties.p"),
    ({"topic": "T", "body": "x", "properties": {"p": 5}}, 400, "properties.p"),
    ({"topic": "T", "body": "x", "keys": ["has space"]}, 400, "keys[0]"),
    ({"topic": "T", "body": "x", "tags": "a\u0002b"}, 400, "tags"),
    ({"topic": "T", "body": "x", "shardingKey": ""}, 400, "shardingKey"),
    ({"topic": "T", "body": "x", "delayMs": -1}, 400, "delayMs"),
    ({"topic": "T", "body": "x", "delayMs": 10**15}, 400, "delayMs"),
    ({"topic": "T", "body": "x", "delayMs": 5, "deliverAt": 5}, 400, "delayMs"),
    ({"topic": "T", "body": "x", "deliverAt": "next tuesday"}, 400, "deliverAt"),
    ({"topic": "T", "body": "x", "deliverAt": "2030-01-01T00:00:00"}, 400, "deliverAt"),
    ({"topic": "T", "body": "x", "deliverAt": "2999-01-01T00:00:00Z"}, 400, "deliverAt"),
    ({"topic": "T", "body": "x", "delay_ms": 5}, 400, "delay_ms"),
    ({"topic": "T", "body": "x", "type": "a:b"}, 400, "type"),
    (["not", "an", "object"], 400, None),
]


@pytest.mark.parametrize(("doc", "status", "field"), BAD)
async def test_bad_messages_name_the_field_and_store_nothing(
    stack: Stack, doc: Any, status: int, field: str | None
) -> None:
    r = await stack.http.post("/v1/messages", json=doc)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == status and problem["title"] and problem["detail"]
    assert problem.get("field") == field
    assert stack.service.retry.stats().pending == 0
    assert not stack.stored("T")


async def test_malformed_json(stack: Stack) -> None:
    r = await stack.http.post(
        "/v1/messages", content=b'{"topic": "T", "body": ', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["title"] == "Malformed JSON"


async def test_body_over_the_limit_is_413(make_stack: Any) -> None:
    async with make_stack(max_body_bytes=1000) as stack:
        r = await stack.http.post("/v1/messages", json={"topic": "T", "body": "x" * 1001})
        assert r.status_code == 413 and r.json()["field"] == "body"
        huge = await stack.http.post("/v1/messages", json={"topic": "T", "body": "x" * 3_000_000})
        assert huge.status_code == 413  # refused from Content-Length, before reading it all
        assert not stack.stored("T")


async def test_bad_ack_parameter(stack: Stack) -> None:
    r = await stack.http.post("/v1/messages", params={"ack": "maybe"}, json={"topic": "T", "body": "x"})
    assert r.status_code == 400 and r.json()["field"] == "ack"


@pytest.mark.parametrize(("messages", "status"), [([], 400), ([{"topic": "T", "body": "x"}] * 11, 413)])
async def test_batch_size_limits(make_stack: Any, messages: list[Any], status: int) -> None:
    async with make_stack(batch_limit=10) as stack:
        r = await stack.http.post("/v1/messages:batch", json={"messages": messages})
        assert r.status_code == status and r.json()["field"] == "messages"
        assert not stack.stored("T")


async def test_store_that_cannot_write_answers_503_and_acknowledges_nothing(stack: Stack) -> None:
    stack.kv.sync_fault = "IO error: No space left on device"
    for ack in ("spool", "broker"):
        if ack == "broker":
            await stack.stop_brokers()  # the send fails, and so does the spool that should follow
        r = await stack.http.post("/v1/messages", params={"ack": ack}, json={"topic": "Full", "body": "x"})
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] and "No space left" in r.json()["detail"]
    ready = await stack.http.get("/readyz")
    assert ready.status_code == 503 and "No space left" in ready.json()["store"]
    stack.kv.sync_fault = None
    await stack.start_brokers()
