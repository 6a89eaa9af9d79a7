"""DelayedMessage codec round trips and corruption detection; delay key layouts order and parse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.delay.keys import (
    CANCELLED,
    SENT,
    done_value,
    due_key,
    index_dues,
    index_key,
    split_done,
    split_due_key,
)
from rocksidecar.delay.message import (
    DELAY_DUE_AT,
    DELAY_PUBLISHED_AT,
    CorruptMessageError,
    DelayedMessage,
    decode_message,
    encode_message,
)
from rocksidecar.storage.keys import MAX_DUE_MS

text = st.text(max_size=20)
ids = st.text(min_size=1, max_size=30)
messages = st.builds(
    DelayedMessage,
    id=ids,
    topic=st.text(min_size=1, max_size=20),
    body=st.binary(max_size=200),
    due_ms=st.integers(0, MAX_DUE_MS),
    tags=st.none() | text,
    keys=st.lists(text, max_size=3).map(tuple),
    properties=st.dictionaries(text, text, max_size=3),
    sharding_key=st.none() | text,
    type=text,
    created_ms=st.integers(0, MAX_DUE_MS),
)


@given(messages)
def test_codec_round_trip(msg: DelayedMessage) -> None:
    assert decode_message(encode_message(msg)) == msg


def test_type_defaults_to_the_topic() -> None:
    assert DelayedMessage(id="a", topic="orders", body=b"", due_ms=1).type == "orders"


def test_for_publish_adds_the_delivery_times_and_keeps_the_rest() -> None:
    msg = DelayedMessage(id="a", topic="t", body=b"x", due_ms=1000, properties={"p": "1"})
    out = msg.for_publish(1250)
    assert out.properties == {"p": "1", DELAY_DUE_AT: "1000", DELAY_PUBLISHED_AT: "1250"}
    assert msg.properties == {"p": "1"}  # the stored message is unchanged
    assert (out.id, out.body, out.due_ms) == ("a", b"x", 1000)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01\x00\x00",
        b"\x02" + encode_message(DelayedMessage(id="a", topic="t", body=b"", due_ms=1))[1:],  # version
        b"\x01\x00\x00\x00\xff{}",  # length past the end
        b"\x01\x00\x00\x00\x02{}",  # fields missing
        b'\x01\x00\x00\x00\x05"abc"',  # not an object
    ],
)
def test_corrupt_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(CorruptMessageError):
        decode_message(data)


@pytest.mark.parametrize(
    ("field", "value"),
    [("due", "1"), ("id", 5), ("id", ""), ("keys", [1]), ("props", {"a": 1}), ("tags", 3), ("topic", None)],
)
def test_a_flipped_field_type_is_corruption(field: str, value: object) -> None:
    import orjson

    raw = encode_message(DelayedMessage(id="a", topic="t", body=b"B", due_ms=1))
    meta = orjson.loads(raw[5:-1])
    meta[field] = value
    blob = orjson.dumps(meta)
    with pytest.raises(CorruptMessageError):
        decode_message(b"\x01" + len(blob).to_bytes(4, "big") + blob + b"B")


@given(st.integers(0, MAX_DUE_MS), st.integers(0, MAX_DUE_MS), ids, ids)
def test_due_keys_sort_by_time_first_and_split_back(a: int, b: int, id_a: str, id_b: str) -> None:
    if a != b:
        assert (due_key(a, id_a) < due_key(b, id_b)) == (a < b)
    assert split_due_key(due_key(a, id_a)) == (a, id_a)


@given(ids, st.lists(st.integers(0, MAX_DUE_MS), max_size=4))
def test_index_entries_belong_to_their_id_only(id_: str, dues: list[int]) -> None:
    mine = [index_key(id_, d) for d in dues]
    longer = [index_key(id_ + "\x00" + "9" * 12, d) for d in dues]  # same prefix, another id
    assert index_dues(id_, mine + longer) == dues


@pytest.mark.parametrize("key", [b"1700000000000", b"1700000000000:", b"1700000000000-x", b"17000:abc"])
def test_split_due_key_refuses_what_is_not_a_key(key: bytes) -> None:
    with pytest.raises(ValueError):
        split_due_key(key)


def test_done_markers_round_trip_and_refuse_junk() -> None:
    assert split_done(done_value(SENT, 1_700_000_000_123)) == (SENT, 1_700_000_000_123)
    assert split_done(done_value(CANCELLED, 5)) == (CANCELLED, 5)
    with pytest.raises(ValueError):
        split_done(b"X1700000000000")
