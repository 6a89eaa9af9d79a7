"""Hostile bodies the audit of session 13 found answered 500 (or worse) by the HTTP API: each is a 400 naming
what is wrong, and nothing of it is sent or stored."""

from __future__ import annotations

import orjson
import pytest

from rocksidecar.app.api.parsing import parse_batch, parse_message
from rocksidecar.app.request import HTTP_FIELDS, Limits, MessageSpec, RequestError, prepare
from tests.app.api.test_hot_path import connect, post, read_answer
from tests.app.conftest import Stack

LIMITS = Limits(max_body_bytes=1024, max_delay_ms=10**9)
DEEP = b'{"topic": "Hot", "body": ' + b"[" * 5000 + b"]" * 5000 + b"}"
NOT_UTF8 = b'{"topic": "Hot", "body": "\xff"}'


@pytest.mark.parametrize("raw", [DEEP, NOT_UTF8], ids=["nested 5000 deep", "not UTF-8"])
def test_a_body_the_fast_decoder_chokes_on_is_a_request_error(raw: bytes) -> None:
    # msgspec raises RecursionError and UnicodeDecodeError for these, not its DecodeError: they escaped
    # as a 500 (and the hot path closed the connection).
    with pytest.raises(RequestError) as one:
        parse_message(raw)
    with pytest.raises(RequestError) as batch:
        parse_batch(b'{"messages": [' + raw + b"]}", 10)
    assert one.value.status == batch.value.status == 400


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        ({"tags": "a\ud800"}, "tags"),
        ({"keys": ["k", "\udfff"]}, "keys[1]"),
        ({"properties": {"p": "\ud800"}}, "properties.p"),
        ({"properties": {"\ud800": "v"}}, "properties"),  # the name cannot be part of the field's name
        ({"sharding_key": "\ud800"}, "shardingKey"),
        ({"type": "\ud800"}, "type"),
    ],
)
def test_a_lone_surrogate_in_any_text_field_is_refused_naming_it(
    changed: dict[str, object], field: str
) -> None:
    spec = MessageSpec("T", body="x", **changed)  # type: ignore[arg-type]
    with pytest.raises(RequestError) as refused:
        prepare(spec, LIMITS, 0, HTTP_FIELDS)
    assert refused.value.field == field and refused.value.status == 400
    orjson.dumps({"field": refused.value.field, "detail": refused.value.detail})  # a problem body can say it


async def test_over_http_a_lone_surrogate_fails_only_its_item_and_a_bad_body_keeps_the_connection(
    stack: Stack,
) -> None:
    batch = (
        b'{"messages": [{"topic": "Hot", "body": "ok"}, {"topic": "Hot", "body": "x", "tags": "\\ud800"}]}'
    )
    reader, writer = await connect(stack)
    writer.write(
        post("/v1/messages:batch", batch) + post("/v1/messages", DEEP) + post("/v1/messages", NOT_UTF8)
    )
    answers = [await read_answer(reader) for _ in range(3)]
    writer.close()
    (status, _, body), *refused = answers
    results = orjson.loads(body)["results"]
    assert status == 200 and [r["status"] for r in results] == ["SENT", "REJECTED"]
    assert results[1]["error"]["field"] == "messages[1].tags"
    assert [(s, orjson.loads(b)["title"]) for s, _, b in refused] == [(400, "Malformed JSON")] * 2
    assert [m.body for m in stack.stored("Hot")] == [b"ok"]
