"""A batch of plain messages (a topic and a text body, nothing else) is decoded as PlainFields and
prepared a batch at once (issue 32): the same messages, the same refusals, as the general path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocksidecar.app.api.operations import _prepared
from rocksidecar.app.api.parsing import PlainBatch, _decode_batch, parse_batch
from rocksidecar.app.request import (
    HTTP_FIELDS,
    Limits,
    MessageFields,
    PlainFields,
    Prepared,
    RequestError,
    prepare,
    prepare_plain,
)
from rocksidecar.app.topic_allow import TopicAllowList
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY, TraceContext

LIMITS = Limits(max_body_bytes=64, max_delay_ms=10**9)


def _raw(messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"messages": messages}).encode()


def test_a_batch_of_topics_and_text_bodies_parses_as_a_plain_batch() -> None:
    raw = _raw([{"topic": "T", "body": "a"}, {"topic": "U", "body": "é"}])
    items = parse_batch(raw, 10)
    assert type(items) is PlainBatch
    assert items == [PlainFields("T", "a"), PlainFields("U", "é")]
    assert items.fields() == list(_decode_batch(raw).messages)  # what the general path parses


@pytest.mark.parametrize(
    "other",
    [
        {"tags": "t"},
        {"tags": None},
        {"keys": []},
        {"properties": {}},
        {"shardingKey": "k"},
        {"type": "x"},
        {"delayMs": 0},
        {"deliverAt": 1},
    ],
)
def test_a_message_with_any_other_field_makes_it_a_general_batch(other: dict[str, Any]) -> None:
    raw = _raw([{"topic": "T", "body": "a"}, {"topic": "T", "body": "b", **other}])
    items = parse_batch(raw, 10)
    assert type(items) is list and type(items[1]) is MessageFields
    assert items == list(_decode_batch(raw).messages)


@pytest.mark.parametrize("body", [None, {"a": 1}, [1], 5])
def test_a_body_not_text_makes_it_a_general_batch(body: object) -> None:
    items = parse_batch(_raw([{"topic": "T", "body": body}]), 10)
    assert type(items) is not PlainBatch


def test_a_plain_batch_over_the_limit_is_refused_as_before() -> None:
    with pytest.raises(RequestError) as refused:
        parse_batch(_raw([{"topic": "T", "body": "a"}] * 3), 2)
    assert (refused.value.status, refused.value.field) == (413, "messages")


plain = st.builds(
    PlainFields,
    topic=st.sampled_from(
        ["T", "U", "", "a b", "TBW102", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX", "a" * 128, "%RETRY%G"]
    ),
    body=st.one_of(st.text(max_size=70), st.sampled_from(["", "\ud800", "x" * 64, "é" * 33])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(plain, min_size=1, max_size=5), st.booleans())
def test_prepare_plain_is_prepare_of_each_or_none_when_one_fails(
    items: list[PlainFields], allow: bool
) -> None:
    limits = Limits(64, 10**9, topics=TopicAllowList.of(["T"]) if allow else None)
    ids = [f"ID{i:030d}" for i in range(len(items))]
    each: list[object] = []
    for p, id in zip(items, ids, strict=True):
        try:
            each.append(prepare(p.fields(), limits, 0, HTTP_FIELDS, id))
        except RequestError:
            each.append(None)
    got = prepare_plain(items, limits, ids)
    assert got == (None if None in each else each)


def test_a_bad_item_of_a_plain_batch_fails_alone_and_names_its_field() -> None:
    items = PlainBatch([PlainFields("T", "a"), PlainFields("T", ""), PlainFields("rmq_sys_x", "b")])
    ids = ["ID0", "ID1", "ID2"]
    out = _prepared(items, LIMITS, 0, HTTP_FIELDS, ids, None, True)
    assert out[0] == prepare(MessageFields("T", "a"), LIMITS, 0, HTTP_FIELDS, "ID0")
    assert isinstance(out[1], RequestError) and out[1].field == "messages[1].body"
    assert isinstance(out[2], RequestError) and out[2].field == "messages[2].topic"


def test_a_plain_batch_to_a_retry_topic_is_refused_as_a_single_send_is() -> None:
    # prepare_plain checked only Java's rules: the batch reached the broker, which refused it
    # (MESSAGE_ILLEGAL, a 422 without a field) where a single send is a 400 naming the topic.
    items = PlainBatch([PlainFields("T", "a"), PlainFields("%RETRY%G", "b")])
    assert prepare_plain(items, LIMITS, ["ID0", "ID1"]) is None
    out = _prepared(items, LIMITS, 0, HTTP_FIELDS, ["ID0", "ID1"], None, True)
    assert isinstance(out[0], Prepared)
    assert isinstance(out[1], RequestError) and out[1].field == "messages[1].topic"
    assert (out[1].status, "retry topic" in out[1].detail) == (400, True)


def test_a_plain_batch_with_a_trace_context_takes_the_general_path() -> None:
    trace = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    out = _prepared(PlainBatch([PlainFields("T", "a")]), LIMITS, 0, HTTP_FIELDS, ["ID0"], trace, True)
    assert isinstance(out[0], Prepared)
    assert out[0].message.properties[TRACEPARENT_PROPERTY] == trace.traceparent  # the plain path adds none
