"""The hot routes' msgspec decoding (app.api.parsing, issue 18) accepts only what the pydantic model
accepts, with the same values: what it refuses goes on to pydantic, so the answers cannot change."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rocksidecar.app.api.parsing import parse_batch, parse_message
from rocksidecar.app.api.schemas import MessageIn
from rocksidecar.app.request import MessageFields, RequestError

FIELDS = [
    "topic",
    "body",
    "bodyBase64",
    "tags",
    "keys",
    "properties",
    "shardingKey",
    "type",
    "delayMs",
    "deliverAt",
]
ATTRS = [
    "topic",
    "body",
    "body_base64",
    "tags",
    "keys",
    "properties",
    "sharding_key",
    "type",
    "delay_ms",
    "deliver_at",
]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
field_value = st.one_of(
    json_value,
    st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
    st.integers(-(2**64), 2**64).map(float),
)
text = st.text(max_size=6)
number = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False))
# Mostly the field's own type (so that both parsers accept often), sometimes any JSON value.
typed = {
    "body": st.one_of(
        st.none(), text, st.dictionaries(text, json_value, max_size=3), st.lists(json_value, max_size=3)
    ),
    "bodyBase64": st.one_of(st.none(), text),
    "tags": st.one_of(st.none(), text),
    "keys": st.lists(text, max_size=3),
    "properties": st.dictionaries(text, text, max_size=3),
    "shardingKey": st.one_of(st.none(), text),
    "type": st.one_of(st.none(), text),
    "delayMs": st.one_of(st.none(), number),
    "deliverAt": st.one_of(st.none(), number, text),
}
document = st.fixed_dictionaries(
    {"topic": st.one_of(text, field_value)},
    optional={
        **{name: st.one_of(kind, field_value) for name, kind in typed.items()},
        "extra": field_value,
        "body_base64": text,
    },
)
well_typed = st.fixed_dictionaries({"topic": text}, optional=typed)


def values(spec: Any) -> list[Any]:
    return [getattr(spec, a) for a in ATTRS]


def fast_or_none(raw: bytes) -> MessageFields | None:
    try:
        return msgspec.json.decode(raw, type=MessageFields)
    except msgspec.DecodeError:
        return None


@settings(max_examples=400, deadline=None)
@given(doc=st.one_of(well_typed, document))
def test_msgspec_accepts_only_what_pydantic_accepts_with_the_same_values(doc: dict[str, Any]) -> None:
    raw = json.dumps(doc).encode()
    fast = fast_or_none(raw)
    try:
        model: MessageIn | None = MessageIn.model_validate_json(raw)
    except ValidationError:
        model = None
    if fast is not None:
        assert model is not None, f"msgspec took what pydantic refuses: {raw!r}"
        assert values(fast) == values(model)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"topic": "T", "body": "x", "delayMs": 5.0}',  # msgspec refuses floats; pydantic takes 5
        b'{"topic": "T", "body": [1.5e400]}',  # out of msgspec's range; pydantic reads inf
        b'{"topic": "T", "body": {"n": 123456789012345678901234567890}}',
    ],
)
def test_what_msgspec_refuses_still_parses_as_pydantic_parses_it(raw: bytes) -> None:
    assert values(parse_message(raw)) == values(MessageIn.model_validate_json(raw))


def test_the_struct_has_the_models_fields_and_json_names() -> None:
    aliases = {f.alias or name for name, f in MessageIn.model_fields.items()}
    assert (
        aliases == set(FIELDS) == set(msgspec.structs.fields(MessageFields)[i].encode_name for i in range(10))
    )
    assert {f.name for f in msgspec.structs.fields(MessageFields)} == set(ATTRS)


def test_a_batch_parses_through_msgspec_and_an_empty_one_is_refused_the_same_way() -> None:
    items = parse_batch(
        b'{"messages": [{"topic": "T", "body": "a"}, {"topic": "U", "bodyBase64": "eA=="}]}', 10
    )
    assert all(isinstance(i, MessageFields) for i in items)
    assert [(i.topic, i.body, i.body_base64) for i in items] == [("T", "a", None), ("U", None, "eA==")]  # type: ignore[union-attr]
    with pytest.raises(RequestError, match="1 to 10 messages, not 0"):
        parse_batch(b'{"messages": []}', 10)
