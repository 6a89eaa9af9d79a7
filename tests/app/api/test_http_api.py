"""The HTTP API as a new user meets it (issue 17 items 1-5, issue 11 item 5): JSON bodies, per-item batch
errors, strict types, topic rules, problem+json everywhere, and Idempotency-Key on a canonical form."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.app.conftest import Stack


# --- 1. a JSON value as the body ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "stored"),
    [({"orderId": 1, "note": "é"}, '{"orderId":1,"note":"é"}'), ([1, {"a": None}], '[1,{"a":null}]')],
)
async def test_json_object_or_array_body_is_sent_as_utf8_json(stack: Stack, body: Any, stored: str) -> None:
    r = await stack.http.post("/v1/messages", json={"topic": "Orders", "body": body})
    assert r.status_code == 200, r.text
    [m] = stack.stored("Orders")
    assert m.body == stored.encode() and json.loads(m.body) == body
    assert m.properties["content-type"] == "application/json"


async def test_text_body_has_no_content_type_and_a_given_one_is_kept(stack: Stack) -> None:
    await stack.http.post("/v1/messages", json={"topic": "Text", "body": "plain"})
    await stack.http.post(
        "/v1/messages",
        json={"topic": "Text", "body": {"a": 1}, "properties": {"content-type": "application/vnd.x+json"}},
    )
    plain, typed = sorted(stack.stored("Text"), key=lambda m: m.queue_offset + 1000 * (m.body[:1] == b"{"))
    assert "content-type" not in plain.properties
    assert typed.properties["content-type"] == "application/vnd.x+json"


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"topic": "T", "body": 5}, "body"),
        ({"topic": "T", "body": True}, "body"),
        ('{"topic": "T", "body": {"x": 1e400}}', "body"),
        ({"topic": 5, "body": "x"}, "topic"),
    ],
)
async def test_a_body_of_another_type_names_the_field(stack: Stack, doc: Any, field: str) -> None:
    raw = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
    r = await stack.http.post("/v1/messages", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == field, r.text
    assert not r.json()["detail"].startswith(":")


async def test_a_top_level_array_says_an_object_is_expected(stack: Stack) -> None:
    r = await stack.http.post("/v1/messages", json=[{"topic": "T", "body": "x"}])
    assert r.status_code == 400 and "must be a JSON object" in r.json()["detail"]


# --- 2. one malformed batch item fails only itself ----------------------------------------------------
async def test_malformed_batch_items_fail_only_themselves(stack: Stack) -> None:
    doc = {
        "messages": [
            {"topic": "Orders", "body": "ok"},
            {"body": "no topic"},
            {"topic": "Orders", "body": "x", "delayMs": "1000"},
            "not an object",
            {"topic": "Orders", "body": "x", "deliverAt": "9" * 5000},
            {"topic": "Orders", "body": {"n": 2}},
        ]
    }
    r = await stack.http.post("/v1/messages:batch", json=doc)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [x["status"] for x in out["results"]] == [
        "SENT",
        "REJECTED",
        "REJECTED",
        "REJECTED",
        "REJECTED",
        "SENT",
    ]
    fields = [x["error"]["field"] for x in out["results"][1:5]]
    assert fields == ["messages[1].topic", "messages[2].delayMs", "messages[3]", "messages[4].deliverAt"]
    assert (out["sent"], out["rejected"]) == (2, 4)
    assert sorted(m.body for m in stack.stored("Orders")) == [b"ok", b'{"n":2}']


async def test_a_batch_that_is_not_an_object_of_messages_is_refused_whole(stack: Stack) -> None:
    for doc in ([], {"messages": "x"}, {"messages": [], "extra": 1}):
        r = await stack.http.post("/v1/messages:batch", json=doc)
        assert r.status_code == 400, (doc, r.text)
    assert not stack.stored("Orders")


# --- 3. strict types; issue 11 item 5: numbers bounded before parsing ---------------------------------
@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"delayMs": True}, "delayMs"),
        ({"delayMs": "1000"}, "delayMs"),
        ({"delayMs": 1000.5}, "delayMs"),
        ({"deliverAt": True}, "deliverAt"),
        ({"deliverAt": "9" * 5000}, "deliverAt"),
        ({"deliverAt": "-" + "9" * 60}, "deliverAt"),
        ({"deliverAt": "١٢٣"}, "deliverAt"),  # Arabic-Indic digits: isdigit() is True, int() is not ms
        ({"keys": "k"}, "keys"),
        ({"tags": 1}, "tags"),
    ],
)
async def test_strict_types(stack: Stack, extra: dict[str, Any], field: str) -> None:
    r = await stack.http.post("/v1/messages", json={"topic": "T", "body": "x", **extra})
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field
    assert stack.service.delay.stats().pending == 0 and not stack.stored("T")


async def test_a_5000_digit_number_is_a_400_naming_the_field(stack: Stack) -> None:
    for name in ("deliverAt", "delayMs"):
        raw = b'{"topic":"T","body":"x","' + name.encode() + b'":' + b"9" * 5000 + b"}"
        r = await stack.http.post("/v1/messages", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["field"] == name, r.text
    batch = (
        b'{"messages":[{"topic":"T","body":"a"},{"topic":"T","body":"b","deliverAt":' + b"9" * 5000 + b"}]}"
    )
    r = await stack.http.post(
        "/v1/messages:batch", content=batch, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    assert [x["status"] for x in r.json()["results"]] == ["SENT", "REJECTED"]
    assert r.json()["results"][1]["error"]["field"] == "messages[1].deliverAt"


# --- 3b. topics as Java's Validators check them ------------------------------------------------------
@pytest.mark.parametrize(
    "topic",
    [
        "T\n",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "TBW102",
        "OFFSET_MOVED_EVENT",
        "rmq_sys_x",
        "%RETRY%G",
    ],
)
async def test_newline_and_system_topics_are_refused(stack: Stack, topic: str) -> None:
    """A group's retry topic too: the brokers take no batches to it, so it was answered 202 and then
    dead-lettered at its first send (found by a random gRPC client)."""
    r = await stack.http.post("/v1/messages", params={"ack": "spool"}, json={"topic": topic, "body": "x"})
    assert r.status_code == 400 and r.json()["field"] == "topic", r.text
    assert stack.service.retry.stats().pending == 0


# --- 4. every error is problem+json -------------------------------------------------------------------
async def test_unknown_routes_and_methods_are_problem_json_with_a_full_allow(stack: Stack) -> None:
    r = await stack.http.get("/v2/nothing")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["status"] == 404 and r.json()["title"] == "Not Found"
    for method in ("PUT", "OPTIONS", "POST"):
        r = await stack.http.request(method, "/v1/messages/abc")
        assert r.status_code == 405, (method, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert set(r.headers["allow"].split(", ")) == {"GET", "DELETE"}
    r = await stack.http.get("/v1/messages")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = await stack.http.get("/x" * 5000)
    assert r.status_code == 404 and len(r.json()["detail"]) < 300  # the path is not echoed whole


async def test_a_batch_over_the_limit_is_titled_as_such(make_stack: Any) -> None:
    async with make_stack(batch_limit=2) as stack:
        r = await stack.http.post("/v1/messages:batch", json={"messages": [{"topic": "T", "body": "x"}] * 3})
        assert r.status_code == 413 and r.json()["title"] == "Batch too large"


# --- 5. Idempotency-Key on a canonical form; a replay says so ------------------------------------------
async def test_idempotency_key_compares_canonical_json_and_marks_replays(stack: Stack) -> None:
    headers = {"Idempotency-Key": "canon-1", "content-type": "application/json"}
    first = await stack.http.post("/v1/messages", content=b'{"topic":"Idem","body":"x"}', headers=headers)
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    again = await stack.http.post(
        "/v1/messages",
        params={"ack": "broker"},  # the default, spelled out
        content=b'{ "body" : "x",\n  "topic" : "Idem" }',
        headers=headers,
    )
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len(stack.stored("Idem")) == 1
    other = await stack.http.post(
        "/v1/messages", params={"ack": "spool"}, content=b'{"topic":"Idem","body":"x"}', headers=headers
    )
    assert other.status_code == 422
