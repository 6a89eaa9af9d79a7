"""Rows to messages: the body from a text or binary column or the whole row as JSON, keys, tags,
sharding key and properties from their columns, nulls left out."""

from __future__ import annotations

import base64
import datetime as dt
import decimal

import orjson
import pytest

from rocksidecar.pipeline.message import (
    ID_PROPERTY,
    EmptyBodyError,
    MessageBuilder,
    UnsendableRowError,
    row_json,
)
from rocksidecar.pipeline.options import WriteOptions
from rocksidecar.pipeline.origin import origin_id


def test_text_and_binary_bodies() -> None:
    text = MessageBuilder(WriteOptions(topic="T", columns={"bodyColumn": "b"}))
    assert text.build({"b": "héllo"}) == {"topic": "T", "body": "héllo"}
    assert text.build({"b": b"\x00\xff"}) == {
        "topic": "T",
        "bodyBase64": base64.b64encode(b"\x00\xff").decode(),
    }
    assert text.build({"b": bytearray(b"ab")})["bodyBase64"] == "YWI="
    for empty in (None, "", b""):
        with pytest.raises(EmptyBodyError, match=r"^the body is empty \(column 'b'\)$"):
            text.build({"b": empty})


def test_the_whole_row_as_json_when_no_body_column() -> None:
    row = {
        "id": 7,
        "when": dt.datetime(2024, 6, 1, 12, 30, tzinfo=dt.UTC),
        "day": dt.date(2024, 6, 1),
        "price": decimal.Decimal("10.10"),
        "raw": b"\x01",
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "nested": {"k": None},
    }
    msg = MessageBuilder(WriteOptions(topic="T")).build(row)
    assert list(msg) == ["topic", "body"]
    assert orjson.loads(msg["body"]) == {
        "id": 7,
        "when": "2024-06-01T12:30:00+00:00",
        "day": "2024-06-01",
        "price": "10.10",
        "raw": "AQ==",
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "nested": {"k": None},
    }
    assert row_json({"b": 1, "a": 2}) == '{"b":1,"a":2}'  # column order kept: equal rows, equal bytes


def test_keys_tags_sharding_key_and_properties() -> None:
    b = MessageBuilder(
        WriteOptions(
            topic="T",
            columns={
                "bodyColumn": "b",
                "keyColumn": "k",
                "tagsColumn": "t",
                "shardingKeyColumn": "s",
                "propertiesColumn": "p",
            },
        )
    )
    full = {"b": "x", "k": "order-1", "t": "TagA", "s": "customer-9", "p": {"region": "eu", "empty": None}}
    assert b.build(full) == {
        "topic": "T",
        "body": "x",
        "keys": ["order-1"],
        "tags": "TagA",
        "shardingKey": "customer-9",
        "properties": {"region": "eu"},
    }
    assert b.build({"b": "x", "k": ["a", None, "b"], "t": None, "s": None, "p": None}) == {
        "topic": "T",
        "body": "x",
        "keys": ["a", "b"],
    }
    assert b.build({"b": "x", "k": [], "t": None, "s": None, "p": {}}) == {"topic": "T", "body": "x"}


def test_row_ids() -> None:
    assert MessageBuilder(WriteOptions(topic="T")).row_id({"id": "a"}, 5) == 5
    by_id = MessageBuilder(WriteOptions(topic="T", columns={"rowIdColumn": "id"}))
    assert by_id.row_id({"id": "a"}, 5) == "a"
    assert by_id.row_id({"id": None}, 5) == 5


def test_keys_tags_and_sharding_keys_that_are_not_strings_go_as_spark_casts_them() -> None:
    opts = WriteOptions(
        topic="T", columns={"bodyColumn": "b", "keyColumn": "k", "tagsColumn": "t", "shardingKeyColumn": "s"}
    )
    builder = MessageBuilder(opts)
    msg = builder.build({"b": "x", "k": 42, "t": True, "s": decimal.Decimal("10.10")})
    assert (msg["keys"], msg["tags"], msg["shardingKey"]) == (["42"], "true", "10.10")
    assert builder.build({"b": "x", "k": dt.date(2024, 6, 1), "t": None, "s": 0})["keys"] == ["2024-06-01"]
    assert builder.build({"b": "x", "k": 0, "t": False, "s": None})["keys"] == ["0"]  # zero is a key


def test_an_id_column_becomes_the_id_property_and_must_be_there() -> None:
    builder = MessageBuilder(WriteOptions(topic="T", columns={"bodyColumn": "b", "idColumn": "i"}))
    assert builder.build({"b": "x", "i": origin_id("S", "broker-a", 1, 7)}) == {
        "topic": "T",
        "body": "x",
        "properties": {ID_PROPERTY: "S/broker-a/1/7"},
    }
    for empty in (None, ""):
        with pytest.raises(UnsendableRowError, match=r"^the id is empty \(column 'i'\)$"):
            builder.build({"b": "x", "i": empty})
    with pytest.raises(UnsendableRowError, match="longer than"):
        builder.build({"b": "x", "i": "x" * 2000})
