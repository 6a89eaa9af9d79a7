"""prepare() skips Message.validate() for a message with no tags, keys or properties (issue 18): what it
returns must still be a message validate() accepts, whatever the input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocksidecar.app.request import HTTP_FIELDS, Limits, MessageSpec, RequestError, prepare
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
