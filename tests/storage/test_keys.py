"""rocksidecar.storage.keys: the 13-digit due-time prefix keeps byte order equal to time order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.storage.keys import MAX_DUE_MS, clamp_due, due_bound, due_prefix, parse_due


@given(st.integers(0, MAX_DUE_MS), st.integers(0, MAX_DUE_MS))
def test_byte_order_is_time_order_and_the_bound_splits_due_from_not_due(a: int, b: int) -> None:
    assert (due_prefix(a) < due_prefix(b)) == (a < b)
    assert (due_prefix(a) + b":any id" < due_bound(b)) == (a <= b)
    assert parse_due(due_prefix(a) + b":x") == a


def test_out_of_range_due_times_are_refused_or_clamped() -> None:
    with pytest.raises(ValueError):
        due_prefix(-1)
    with pytest.raises(ValueError):
        due_prefix(MAX_DUE_MS + 1)
    assert clamp_due(-5) == 0
    assert clamp_due(MAX_DUE_MS + 7) == MAX_DUE_MS
    assert due_bound(MAX_DUE_MS) > due_prefix(MAX_DUE_MS) + b"\xfe"


@pytest.mark.parametrize("key", [b"", b"12345", b"123456789012x:a", b"abcdefghijklm:a"])
def test_parse_due_refuses_keys_without_the_prefix(key: bytes) -> None:
    with pytest.raises(ValueError):
        parse_due(key)
