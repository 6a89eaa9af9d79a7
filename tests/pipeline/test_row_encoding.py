"""Different rows stay different on the wire: in a whole-row JSON body a double's NaN and +-Infinity are
written as Spark's own to_json writes them ("NaN", "Infinity", "-Infinity"), not as null, which says the
value was missing; and two batches of different ids never share an Idempotency-Key."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rocksidecar.pipeline import options
from rocksidecar.pipeline.message import MessageBuilder
from rocksidecar.pipeline.publisher import ids_key

NAN, INF = float("nan"), float("inf")


def body_of(row: dict[str, Any]) -> str:
    body: str = MessageBuilder(options.parse({"topic": "T"})).build(row)["body"]
    return body


def test_nan_and_infinity_are_written_as_spark_writes_them_not_as_null() -> None:
    assert body_of({"x": NAN, "y": INF, "z": -INF, "n": None, "f": 1.5}) == (
        '{"x":"NaN","y":"Infinity","z":"-Infinity","n":null,"f":1.5}'
    )


def test_nan_and_infinity_inside_structs_arrays_and_maps() -> None:
    row = {"s": {"a": [NAN, 2.0]}, "m": {INF: -INF}, "b": b"\x00", "n": None}
    assert orjson.loads(body_of(row)) == {
        "s": {"a": ["NaN", 2.0]},
        "m": {"Infinity": "-Infinity"},
        "b": "AA==",
        "n": None,
    }


def test_a_row_of_finite_values_is_unchanged() -> None:
    assert body_of({"x": 0.1, "k": "null", "n": None}) == '{"x":0.1,"k":"null","n":null}'


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (["a\nb"], ["a", "b"]),  # joined with '\n' before: the same key, so the second batch got 422
        (["a", ""], ["a"]),
        (["", ""], [""]),
        (['a","b'], ["a", "b"]),
    ],
)
def test_batches_of_different_ids_get_different_idempotency_keys(one: list[str], other: list[str]) -> None:
    assert ids_key("job", one) != ids_key("job", other)


def test_the_same_ids_get_the_same_key() -> None:
    assert ids_key("job", iter(["a", "b"])) == ids_key("job", ["a", "b"])
