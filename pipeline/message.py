"""One row (as a dict) -> one message of the sidecar's batch JSON, per the column options. Without a
body column the body is the whole row as JSON, columns in schema order, so equal rows give equal bytes."""

from __future__ import annotations

import base64
import datetime
import decimal
import math
from collections.abc import Mapping
from typing import Any

import orjson

from .options import WriteOptions


class UnsendableRowError(ValueError):
    """The row cannot be a message (said before sending, naming the column), and is not sent."""


class EmptyBodyError(UnsendableRowError):
    """The row's body column is null or empty."""


class EmptyIdError(UnsendableRowError):
    """The row's idColumn is null or empty: its request's Idempotency-Key could not name it."""


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)  # a JSON number would round it
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def as_text(value: Any) -> str:
    """A key, tag or sharding key column that is not a string: the text Spark's cast to string gives."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)  # int, Decimal (keeps its scale, as Spark does)


def _spark_float(value: float) -> str:
    """A double or float JSON has no number for, as Spark's to_json and JSON writer write it."""
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


# map keys orjson writes itself (OPT_NON_STR_KEYS), of the types a Spark map key reaches Python as
_KEYS_ORJSON_WRITES = (str, int, float, datetime.date, datetime.time)


class _KeyWithoutText(TypeError):
    """A map key that has no JSON text (its type's name in args[0])."""


def _spark_key(key: Any) -> Any:
    """A map key as JSON text, written as the same value is. Spark's to_json writes a key as its internal
    value's toString: for a decimal Java's BigDecimal.toString, which Python's str(Decimal) matches
    ("1.50", "1E-8", "0E-8"), as _json_default writes a decimal value. A date or timestamp key it writes
    as days or microseconds since the epoch ("19724"), which no reader of a body expects beside the same
    value written as ISO text: orjson writes such a key as its value, ISO text ("2024-01-02"). A binary
    key Spark writes as the JVM array's identity ("[B@1b2c3d", another on every run), which says nothing
    of the bytes: there is no text to match, so such a key (as any other orjson cannot write) is refused
    (options.check_schema refuses such a map on the driver already)."""
    if isinstance(key, float):
        return _spark_value(key)
    if isinstance(key, decimal.Decimal):
        return str(key)
    if key is None or isinstance(key, _KEYS_ORJSON_WRITES):
        return key
    raise _KeyWithoutText(type(key).__name__)


def _spark_value(value: Any) -> Any:
    """``value`` with every NaN and +-Infinity (in structs, arrays and maps too, keys included) as Spark's
    text for it, and every map key as _spark_key writes it; other values as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _spark_float(value)
    if isinstance(value, dict):
        return {_spark_key(k): _spark_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_spark_value(v) for v in value]
    return value


def row_json(row: Mapping[str, Any]) -> str:
    """The row as JSON. A NaN or +-Infinity is written as Spark's to_json writes it, "NaN", "Infinity",
    "-Infinity" (strings, which Spark's JSON reader takes back as a double), not as orjson's null, which
    would say the value was missing; a map key orjson cannot write (a decimal) as Spark writes it. Only
    a row whose JSON has a null, or that orjson cannot write, is looked at again (walking every row would
    cost every row).

    Raises:
        UnsendableRowError: a map key has no JSON text (binary), naming the column.
    """
    try:
        text = orjson.dumps(row, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        text = b"null"  # a map key orjson does not write (Decimal, bytes): see below
    if b"null" in text:
        spark: dict[str, Any] = {}
        for column, value in row.items():
            try:
                spark[column] = _spark_value(value)
            except _KeyWithoutText as exc:
                raise UnsendableRowError(
                    f"column {column!r} is a map whose keys ({exc}) have no JSON text for the whole-row "
                    "body; convert the map (e.g. its keys to string) or set bodyColumn"
                ) from None
        text = orjson.dumps(spark, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
    return text.decode("utf-8")


TRACEPARENT_PROPERTY = "TRACE_CONTEXT"
# the user property that carries a row's idColumn value, so a consumer sees which source message (for
# ids from pipeline.origin) the output message is, and can deduplicate beyond the sidecar's window
ID_PROPERTY = "rocksidecarId"
MAX_ID_CHARS = 1024


class MessageBuilder:
    def __init__(self, opts: WriteOptions) -> None:
        self._topic = opts.topic
        self._body = opts.column("bodyColumn")
        self._key = opts.column("keyColumn")
        self._tags = opts.column("tagsColumn")
        self._sharding = opts.column("shardingKeyColumn")
        self._properties = opts.column("propertiesColumn")
        self._row_id = opts.column("rowIdColumn")
        self._traceparent = opts.column("traceparentColumn")
        self._id = opts.column("idColumn")

    @property
    def has_ids(self) -> bool:
        return self._id is not None

    def id_of(self, row: Mapping[str, Any]) -> str:
        """The row's idColumn value. Raises EmptyIdError (null, empty) or UnsendableRowError (too long)."""
        assert self._id is not None
        value = row[self._id]
        if not value:
            raise EmptyIdError(f"the id is empty (column {self._id!r})")
        if len(value) > MAX_ID_CHARS:
            raise UnsendableRowError(f"the id is longer than {MAX_ID_CHARS} characters (column {self._id!r})")
        return str(value)

    def build(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The message for ``row``.

        Raises:
            EmptyBodyError: the body column is null (an empty CSV field reads as null) or empty; said
                here, naming the column, since the sidecar could only name its own field for it.
            UnsendableRowError: the idColumn value is null, empty or too long; without bodyColumn, a map
                key has no JSON text (row_json).
        """
        msg: dict[str, Any] = {"topic": self._topic}
        if self._body is None:
            msg["body"] = row_json(row)
        else:
            body = row[self._body]
            if body is None or len(body) == 0:
                raise EmptyBodyError(f"the body is empty (column {self._body!r})")
            if isinstance(body, str):
                msg["body"] = body
            else:
                msg["bodyBase64"] = base64.b64encode(bytes(body)).decode("ascii")
        if self._key is not None:
            keys = row[self._key]
            if isinstance(keys, list | tuple):
                if keys:
                    msg["keys"] = [k for k in keys if k is not None]
            elif keys is not None:
                msg["keys"] = [as_text(keys)]
        if self._tags is not None and row[self._tags] is not None:
            msg["tags"] = as_text(row[self._tags])
        if self._sharding is not None and row[self._sharding] is not None:
            msg["shardingKey"] = as_text(row[self._sharding])
        if self._properties is not None and row[self._properties]:
            msg["properties"] = {k: v for k, v in row[self._properties].items() if v is not None}
        if self._traceparent is not None and row[self._traceparent]:
            # the property the sidecar keeps a W3C traceparent in (app.tracing.context); it checks the
            # value and drops one that does not parse, so a bad row still goes out, untraced
            msg.setdefault("properties", {})[TRACEPARENT_PROPERTY] = row[self._traceparent]
        if self._id is not None:
            msg.setdefault("properties", {})[ID_PROPERTY] = self.id_of(row)
        return msg

    def row_id(self, row: Mapping[str, Any], index: int) -> str | int:
        """How an error names this row: its rowIdColumn value, else its index within the partition."""
        if self._row_id is None:
            return index
        value = row[self._row_id]
        return index if value is None else value
