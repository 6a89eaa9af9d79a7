"""The value bound that refuses a huge batch before parsing: exact for any valid JSON document."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.app.api.json_count import values_at_most

# Valid JSON is UTF-8, so no lone surrogates (category Cs): json.dumps(...).encode() cannot encode them.
CHARS = st.sampled_from(list('ab",[]{}:\\\n é\u2028')) | st.characters(exclude_categories=("Cs",))
TEXT = st.text(alphabet=CHARS, max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=30,
)


def bound(value: Any) -> int:
    """One per value, plus one per empty container (its brackets count, it has no items)."""
    if isinstance(value, list):
        return 1 + max(len(value), 1) - len(value) + sum(bound(v) for v in value)
    if isinstance(value, dict):
        return 1 + max(len(value), 1) - len(value) + sum(bound(v) for v in value.values())
    return 1


@given(JSON, st.booleans(), st.booleans())
def test_the_bound_is_exact(value: Any, ascii_only: bool, compact: bool) -> None:
    separators = (",", ":") if compact else (", ", ": ")
    doc = json.dumps(value, ensure_ascii=ascii_only, separators=separators).encode()
    n = bound(value)
    assert values_at_most(doc, n)
    assert not values_at_most(doc, n - 1)


def test_a_million_tiny_messages() -> None:
    body = b'{"messages": [' + b",".join([b'{"topic":"T","body":"a,b]}{["}'] * 1_000_000) + b"]}"
    assert not values_at_most(body, 1000 * 256)
    assert values_at_most(body, 3_000_002)
