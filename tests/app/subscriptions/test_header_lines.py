"""HeaderLines, the push path's header bytes, against headers_for (the CloudEvents mapping it shortcuts):
the same headers for any message, whichever path a message takes."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocksidecar.app.http_client import CheckedLines, are_header_lines
from rocksidecar.app.subscriptions.cloudevents import HeaderLines, encode_headers, headers_for
from rocksidecar.rmq.message import MessageQueue
from tests.rmq.consumer.factory import stored

MQ = MessageQueue("T", "broker-a", 3)

# printable ASCII with the one character the encoding escapes among it (%) and spaces (keys split on
# them), or any characters at all (non-ASCII, control characters, CR and LF)
texts = st.text(st.sampled_from("ab %:;/"), max_size=8) | st.text(max_size=12)
NAMES = ["UNIQ_KEY", "TAGS", "KEYS", "WAIT", "content-type", "region", "Weird-Name", "TRACE_CONTEXT"]
properties = st.dictionaries(st.sampled_from(NAMES) | texts, texts, max_size=5)


def lines_of(encoded: bytes) -> list[bytes]:
    return sorted(encoded.split(b"\r\n"))  # the same headers in any order


@settings(max_examples=400, deadline=None)
@example({"TAGS": "a%b", "KEYS": " k1  k%2 ", "UNIQ_KEY": "U1"}, "T", "broker-a", 1, 0, 0, "G")
@example({"content-type": "text/plain; charset=\u00e9", "WAIT": "true"}, "T", "broker-a", 1, 0, 0, "G")
@example({"UNIQ_KEY": "U1"}, "T", "broker-a", 1, 0, 2**62, "G")  # no time: past RFC 3339's years
@given(
    properties,
    st.sampled_from(["T", "Tö", "%RETRY%G", "T\r\nx-evil: 1"]),
    st.sampled_from(["broker-a", "b\u00e9", "b\n"]),
    st.integers(0, 2**40),
    st.integers(0, 16),
    st.integers(0, 253_402_300_799_999) | st.integers(-(2**63), 2**63 - 1),  # any: the producer's number
    st.sampled_from(["G", "gr\u00fcppe", "G\r"]),
)
def test_the_same_headers_as_headers_for(
    props: dict[str, str], topic: str, broker: str, offset: int, reconsumes: int, born: int, group: str
) -> None:
    mq = MessageQueue(topic, broker, 5)
    msg = dataclasses.replace(
        stored(offset, topic=topic, queue_id=5, reconsume_times=reconsumes),
        properties=props,
        born_timestamp_ms=born,
    )
    lines = HeaderLines(group)
    for _ in range(2):  # the second time from the queue's cached lines
        out = lines(msg, mq)
        assert lines_of(out) == lines_of(encode_headers(headers_for(msg, mq, group)))
        # what it vouches for (the HTTP client then skips its check) always passes that check
        assert type(out) is not CheckedLines or are_header_lines(out)


@pytest.mark.parametrize(
    "props",
    [
        {"UNIQ_KEY": "U1\nx-evil: 1"},
        {"UNIQ_KEY": "U1\r\nx-evil: 1"},  # well-formed lines: the HTTP client's check would pass them
        {"UNIQ_KEY": "U1", "content-type": "text/plain\r\nx-evil: 1"},
        {"UNIQ_KEY": "U1", "content-type": "text/plain\r\n\r\nbody"},
        {"UNIQ_KEY": "U1", "content-type": "text/plain\r\nx-evil: 1", "region": "eu"},  # headers_for's path
    ],
)
def test_a_producer_s_line_break_never_becomes_a_header(props: dict[str, str]) -> None:
    plain = stored(7, tags="TagA")
    msg = dataclasses.replace(plain, properties={**plain.properties, **props})
    out = HeaderLines("G")(msg, MQ)
    assert are_header_lines(out)  # delivered, not refused by the HTTP client
    names = [line.split(b":", 1)[0] for line in out.split(b"\r\n") if line]
    assert b"x-evil" not in names and b"body" not in names, out
    assert names.count(b"content-type") == 1 and names.count(b"ce-id") == 1
    if "content-type" in props:
        assert b"content-type: application/octet-stream\r\n" in out
    else:
        assert b"ce-id: U1%0D%0Ax-evil: 1\r\n" in out or b"ce-id: U1%0Ax-evil: 1\r\n" in out


def test_a_plain_message_takes_the_short_path_and_a_json_one_keeps_its_type() -> None:
    msg = stored(7, tags="TagA")
    lines = HeaderLines("G")
    plain = lines(msg, MQ)
    assert b"content-type: application/octet-stream\r\n" in plain and b"ce-rocketmqtags: TagA\r\n" in plain
    json_msg = dataclasses.replace(msg, properties={**msg.properties, "content-type": "application/json"})
    assert b"content-type: application/json\r\n" in lines(json_msg, MQ)
    assert len(lines._queues) == 1  # one queue, encoded once


def test_the_queue_and_tag_caches_stay_bounded_and_the_headers_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A storm of distinct queues and tags (a hostile producer's tags) only clears the caches: never more
    than their bound kept, and every message's headers still those of headers_for."""
    from rocksidecar.app.subscriptions import cloudevents

    monkeypatch.setattr(cloudevents, "MAX_CACHED_QUEUES", 4)
    monkeypatch.setattr(cloudevents, "MAX_CACHED_TAGS", 3)
    lines = HeaderLines("G")
    for i in range(20):
        mq = MessageQueue("T", "broker-a", i)
        msg = stored(i, queue_id=i, tags=f"tag{i}")
        assert lines_of(lines(msg, mq)) == lines_of(encode_headers(headers_for(msg, mq, "G")))
        assert len(lines._queues) <= 4
        assert len(lines._tags) <= 3
    assert len(lines._queues) >= 1 and len(lines._tags) >= 1  # the last ones kept
