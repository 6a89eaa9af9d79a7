"""prepare() skips Message.validate() for a message with no tags, keys or properties (issue 18): what it
returns must still be a message validate() accepts, whatever the input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocksidecar.app.request import (
    HTTP_FIELDS,
    MAX_JSON_DEPTH,
    MAX_KEYS,
    MAX_PROPERTIES,
    Limits,
    MessageSpec,
    RequestError,
    parse_time_ms,
    prepare,
)
from rocksidecar.rmq import InvalidMessageError
from rocksidecar.rmq.message import validate_topic

LIMITS = Limits(max_body_bytes=64, max_delay_ms=10**9)
text = st.text(st.characters(codec="utf-8"), max_size=20)
topics = st.one_of(st.sampled_from(["T", "TBW102", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX", "a" * 128]), text)
specs = st.builds(
    MessageSpec,
    topic=topics,
    body=st.one_of(st.none(), st.text(max_size=80)),
    body_base64=st.one_of(st.none(), st.sampled_from(["eA==", "", "!"])),
    tags=st.one_of(st.none(), text),
    keys=st.lists(text, max_size=2).map(tuple),
    properties=st.dictionaries(text, text, max_size=2),
)


@settings(max_examples=500, deadline=None)
@given(specs)
def test_what_prepare_accepts_validate_accepts(spec: MessageSpec) -> None:
    try:
        prepared = prepare(spec, LIMITS, 0, HTTP_FIELDS)
    except RequestError:
        return
    prepared.message.validate(LIMITS.max_body_bytes)  # raises if prepare let a bad message through


@pytest.mark.parametrize("topic", ["", "a b", "TBW102", "rmq_sys_x", "a" * 128])
def test_a_bare_message_with_a_bad_topic_is_refused(topic: str) -> None:
    with pytest.raises(InvalidMessageError):
        validate_topic(topic)
    with pytest.raises(RequestError) as refused:
        prepare(MessageSpec(topic, body="x"), LIMITS, 0, HTTP_FIELDS)
    assert refused.value.field == "topic"


def test_a_group_s_retry_topic_is_refused_though_java_s_check_takes_it() -> None:
    validate_topic("%RETRY%G")  # a single send to it is Java's; a batch the broker refuses
    with pytest.raises(RequestError) as refused:
        prepare(MessageSpec("%RETRY%G", body="x"), LIMITS, 0, HTTP_FIELDS)
    assert refused.value.field == "topic" and "retry topic" in refused.value.detail


def test_a_bare_message_with_an_empty_or_large_body_is_refused() -> None:
    for body, status in (("", 400), ("x" * 65, 413)):
        with pytest.raises(RequestError) as refused:
            prepare(MessageSpec("T", body=body), LIMITS, 0, HTTP_FIELDS)
        assert (refused.value.field, refused.value.status) == ("body", status)


@pytest.mark.parametrize("text", ["--5", "-", "- 5", "-+5", "+5", "²", "-²", "1_000", "٣"])
def test_deliver_at_takes_ascii_digits_after_at_most_one_minus(text: str) -> None:
    with pytest.raises(RequestError) as refused:  # "--5" reached int(): a ValueError, a 500
        parse_time_ms(text, "deliverAt")
    assert refused.value.field == "deliverAt" and refused.value.status == 400


def test_deliver_at_as_epoch_digits() -> None:
    assert [parse_time_ms(t, "deliverAt") for t in ("5", "-5", " 12 ", "-0")] == [5, -5, 12, 0]


def _nested(depth: int) -> list[Any]:
    body: list[Any] = []
    for _ in range(depth - 1):
        body = [body]
    return body


def _at_stack_depth(frames: int, call: Callable[[], Any]) -> Any:
    return call() if frames == 0 else _at_stack_depth(frames - 1, call)


def test_a_json_body_nested_past_the_bound_is_refused_naming_body() -> None:
    limits = Limits(max_body_bytes=1 << 20, max_delay_ms=10**9)
    ok = prepare(MessageSpec("T", body=_nested(MAX_JSON_DEPTH)), limits, 0, HTTP_FIELDS)
    assert ok.message.body == b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert prepare(MessageSpec("T", body={"a": [{"b": _nested(MAX_JSON_DEPTH - 3)}]}), limits, 0, HTTP_FIELDS)
    # Deeper than the bound: refused at any stack depth, where json.dumps raised RecursionError (a 500)
    # from about 940 levels, fewer on a deeper stack.
    for depth, frames in ((MAX_JSON_DEPTH + 1, 0), (990, 0), (MAX_JSON_DEPTH + 1, 700), (990, 700)):
        spec = MessageSpec("T", body={"a": _nested(depth - 1)})
        with pytest.raises(RequestError) as refused:
            _at_stack_depth(frames, lambda spec=spec: prepare(spec, limits, 0, HTTP_FIELDS))  # type: ignore[misc]
        assert (refused.value.field, refused.value.status) == ("body", 400), (depth, frames)
        assert str(MAX_JSON_DEPTH) in refused.value.detail


def test_too_many_keys_or_properties_are_refused_by_count_naming_the_field() -> None:
    limits = Limits(max_body_bytes=64, max_delay_ms=10**9)
    for spec, field in (
        (MessageSpec("T", body="x", keys=["k"] * (MAX_KEYS + 1)), "keys"),
        (
            MessageSpec("T", body="x", properties={f"p{i}": "v" for i in range(MAX_PROPERTIES + 1)}),
            "properties",
        ),
    ):
        with pytest.raises(RequestError) as refused:
            prepare(spec, limits, 0, HTTP_FIELDS)
        assert (refused.value.field, refused.value.status) == (field, 400)
        assert "at most" in refused.value.detail


def test_keys_over_the_property_limit_on_their_own_are_named_keys() -> None:
    limits = Limits(max_body_bytes=64, max_delay_ms=10**9)
    with pytest.raises(RequestError) as refused:  # was "properties": the combined total's name
        prepare(MessageSpec("T", body="x", keys=["k" * 4000] * 9), limits, 0, HTTP_FIELDS)
    assert refused.value.field == "keys"
    with pytest.raises(RequestError) as refused:  # the properties are what is over
        prepare(MessageSpec("T", body="x", keys=["k"], properties={"p": "v" * 33000}), limits, 0, HTTP_FIELDS)
    assert refused.value.field == "properties"


def test_a_valid_message_at_the_count_bounds_is_not_refused_by_them() -> None:
    # The bounds are what the property limit leaves room for: at them, the byte limit still decides.
    keys = [f"{i:x}" for i in range(MAX_KEYS // 4)]
    prepared = prepare(MessageSpec("T", body="x", keys=keys), LIMITS, 0, HTTP_FIELDS)
    assert len(prepared.message.keys) == len(keys)
