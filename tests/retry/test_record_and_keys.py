"""RetryRecord codec round trips and corruption detection; key layout ordering and parsing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.retry.keys import (
    PendingKey,
    dead_key,
    index_key,
    index_prefix,
    parse_pending_key,
    pending_key,
    pending_of_dead,
    split_index_key,
)
from rocksidecar.retry.record import (
    HISTORY_LIMIT,
    CorruptRecordError,
    RetryRecord,
    decode_record,
    encode_record,
)
from rocksidecar.storage.keys import MAX_DUE_MS, due_bound

text = st.text(max_size=20)
records = st.builds(
    RetryRecord,
    id=st.text(min_size=1, max_size=40),
    topic=st.text(min_size=1, max_size=20),
    body=st.binary(max_size=300),
    tags=st.none() | text,
    keys=st.lists(text, max_size=3).map(tuple),
    properties=st.dictionaries(text, text, max_size=4),
    sharding_key=st.none() | text,
    type=text,
    created_ms=st.integers(0, MAX_DUE_MS),
    first_failure_ms=st.integers(0, MAX_DUE_MS),
    retry_count=st.integers(0, 1000),
    last_error=text,
    history=st.lists(st.tuples(st.integers(0, MAX_DUE_MS), text), max_size=3).map(tuple),
)


@given(records)
def test_record_round_trip(record: RetryRecord) -> None:
    assert decode_record(encode_record(record)) == record


def test_type_defaults_to_topic_and_failed_keeps_short_history() -> None:
    record = RetryRecord(id="A1", topic="orders", body=b"\xff\x00")
    assert record.type == "orders"
    for i in range(HISTORY_LIMIT + 5):
        record = record.failed(1000 + i, f"error {i}")
    assert record.retry_count == HISTORY_LIMIT + 5
    assert record.last_error == f"error {HISTORY_LIMIT + 4}"
    assert len(record.history) == HISTORY_LIMIT
    assert record.history[0] == (1005, "error 5")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01\x00",
        b"\x02\x00\x00\x00\x02{}",  # unknown version
        b"\x01\x00\x00\x00\xffabc",  # length past the end
        b"\x01\x00\x00\x00\x03{x}body",  # not JSON
        b"\x01\x00\x00\x00\x02{}body",  # fields missing
        b'\x01\x00\x00\x00\x0b{"id":true}',
    ],
)
def test_corrupt_bytes_raise_corrupt_record_error(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_record(data)


def test_a_flipped_type_inside_valid_json_is_corrupt() -> None:
    good = encode_record(RetryRecord(id="A1", topic="t", body=b"x"))
    bad = good.replace(b'"retries":0', b'"retries":"0"')
    with pytest.raises(CorruptRecordError):
        decode_record(bad)


@given(st.integers(0, MAX_DUE_MS), st.integers(0, MAX_DUE_MS), st.text(), st.text())
def test_pending_keys_sort_by_due_time(a: int, b: int, type_: str, id_: str) -> None:
    ka, kb = pending_key(a, 7, type_, id_), pending_key(b, 0, "z", "z")
    if a < b:
        assert ka < kb
    assert (ka < due_bound(b)) == (a <= b)


@given(st.integers(0, MAX_DUE_MS), st.integers(0, 99), st.text(), st.text())
def test_pending_key_parses_back_even_with_separators_in_fields(
    due: int, count: int, type_: str, id_: str
) -> None:
    assert parse_pending_key(pending_key(due, count, type_, id_)) == PendingKey(due, count, type_, id_)


def test_pending_key_layout_is_the_seed_layout() -> None:
    assert pending_key(1_700_000_000_123, 2, "orders", "AC11") == b"1700000000123:2:orders:AC11"
    assert pending_key(5, 0, "a:b", "%") == b"0000000000005:0:a%3Ab:%25"
    with pytest.raises(ValueError):
        pending_key(MAX_DUE_MS + 1, 0, "t", "i")
    with pytest.raises(ValueError):
        parse_pending_key(b"garbage")


def test_index_and_dead_keys() -> None:
    pk = pending_key(1000, 0, "t", "id:1")
    ik = index_key("id:1", b"p", pk)
    assert ik.startswith(index_prefix("id:1"))
    assert not ik.startswith(index_prefix("id"))  # an id is never a prefix match of another id
    assert split_index_key(ik) == (b"p", pk)
    dk = dead_key(2000, pk)
    assert pending_of_dead(dk) == pk
    assert dead_key(1999, pk) < dk


@pytest.mark.parametrize(
    ("field", "value"),
    [("keys", "abc"), ("props", ["a"]), ("props", {"k": 1}), ("history", [[1, 2]]), ("tags", 5), ("id", "")],
)
def test_semantically_corrupt_fields_are_detected(field: str, value: object) -> None:
    import orjson

    good = encode_record(RetryRecord(id="A1", topic="t", body=b"x"))
    meta = orjson.loads(good[5:-1])
    meta[field] = value
    blob = orjson.dumps(meta)
    with pytest.raises(CorruptRecordError):
        decode_record(b"\x01" + len(blob).to_bytes(4, "big") + blob + b"x")


def test_id_of_reads_the_last_field() -> None:
    from rocksidecar.retry.keys import id_of

    assert id_of(pending_key(5, 3, "a:b", "x:%y")) == "x:%y"
    assert id_of(b"garbage") is None
    assert id_of(b"0000000000005:0:t:") is None
