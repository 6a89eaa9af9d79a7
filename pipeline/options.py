"""The data source's options, parsed and checked on the driver (against the DataFrame's schema too) so a
typo fails the write before any task runs, with an error naming the option."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from rocksidecar.rmq.errors import InvalidMessageError
from rocksidecar.rmq.message import validate_batch_topic

from .backoff import Backoff

DEFAULT_ENDPOINT = "http://127.0.0.1:9880"
DEFAULT_BATCH_SIZE = 500
DEFAULT_BATCH_BYTES = 8 * 1024 * 1024  # well under the sidecar's default 64 MiB request limit
TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")  # RocketMQ's topic rule, for the read options too
# The sidecar's send path refuses more than TOPIC (app.request.check_send_topic: rmq.message.validate_topic,
# then no consumer group's retry topic): each row to such a topic would come back REJECTED, after the whole
# job ran. The sink checks with rmq's own rule (an import the contract allows this module: no broker talk).
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")  # the Idempotency-Key is built from it (<= 255 chars)
# what an Authorization header can carry after "Bearer ": printable ASCII, no spaces. A trailing newline
# (a secret made from a file) or a non-ASCII character would fail every request of every task instead
_TOKEN = re.compile(r"[!-~]+")
# The column options, each declared here once: option -> the Spark types its column may have
# (DataType.simpleString()). WriteOptions.columns holds the ones given, under the same names.
COLUMN_TYPES: dict[str, tuple[str, ...]] = {
    "bodyColumn": ("string", "binary"),
    "keyColumn": ("string", "array<string>"),
    "tagsColumn": ("string",),
    "shardingKeyColumn": ("string",),
    "propertiesColumn": ("map<string,string>",),
    "rowIdColumn": ("string", "tinyint", "smallint", "int", "bigint"),
    "traceparentColumn": ("string",),
    "idColumn": ("string",),
}
KNOWN = {
    "topic",
    "endpoint",
    "token",
    "timeout",
    "batchSize",
    "maxBatchBytes",
    "maxRetries",
    "retryBackoff",
    "retryBackoffMax",
    "jobId",
    "ack",
    "reportPath",
    *COLUMN_TYPES,
}
# options whose column may also have a type with one obvious text form; the value is sent as that text
AS_TEXT = {"keyColumn", "tagsColumn", "shardingKeyColumn"}
TEXT_FORMS = ("tinyint", "smallint", "int", "bigint", "boolean", "date")
# Spark types the whole-row JSON body cannot write, as they stand in DataType.simpleString() (at its start
# or after '<', ',' or ':', and before its end, '>' or ','; a struct field's name is followed by ':'). A
# day-time interval reaches Python as a timedelta, which has no one JSON form (seconds? ISO-8601? Spark's
# 'INTERVAL ...' text?), so, as for a column option's type without one text form, the user casts it;
# year-month and calendar intervals cannot reach Python at all, variant and geo values are PySpark objects.
# Each would fail every task (and its retries) with a TypeError naming no column.
_NOT_JSON = re.compile(
    r"(?:^|[<,:])(interval(?: [a-z]+(?: to [a-z]+)?)?|variant|geography\(\w*\)|geometry\(\w*\))(?=$|[>,])"
)
# A map whose keys the whole-row JSON body has no text for, anywhere in DataType.simpleString(): binary
# keys (Spark's to_json writes the JVM array's identity, "[B@1b2c3d", another on every run) and struct
# keys (a Row in Python) message.row_json refuses row by row, each on its executor; with array keys (a
# list, unhashable) PySpark fails every task building the row. The schema says so once, before any task.
_NO_KEY_TEXT = re.compile(r"(?:^|[<,:])map<(binary(?=,)|struct(?=<)|array(?=<))")
# Spark adds these itself; they are not ours to reject
_SPARK_OWN = {"path", "checkpointlocation", "queryname"}


class OptionError(ValueError):
    """A data source option is missing, unknown or has a bad value; the message names it."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    topic: str
    endpoint: str = DEFAULT_ENDPOINT
    token: str = ""
    timeout_s: float = 30.0
    batch_size: int = DEFAULT_BATCH_SIZE
    max_batch_bytes: int = DEFAULT_BATCH_BYTES
    max_retries: int = 20
    retry_backoff_s: float = 0.5
    retry_backoff_max_s: float = 30.0
    job_id: str | None = None
    ack: str | None = None
    report_path: str | None = None
    columns: Mapping[str, str] = field(default_factory=dict)  # column option -> column, as given

    def backoff(self) -> Backoff:
        return Backoff(initial_s=self.retry_backoff_s, max_s=self.retry_backoff_max_s)

    def column(self, option: str) -> str | None:
        """The column that ``option`` (a key of COLUMN_TYPES, e.g. "bodyColumn") names; None when it is
        not given. idColumn: each row's own id (e.g. pipeline.origin.origin_id), so keys name the rows."""
        if option not in COLUMN_TYPES:
            raise KeyError(f"no column option {option!r}")  # a misspelt name in our code, not the user's
        return self.columns.get(option)


def _number(opts: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option {name}={raw!r} is not a number") from None
    if not low <= value <= high:
        raise OptionError(f"option {name}={raw!r} must be between {low:g} and {high:g}")
    return value


def integer(opts: Mapping[str, str], name: str, default: int | None, low: int, high: int) -> int | None:
    """The whole number option ``name`` (digits, exactly: offsets go past a float's precision) within
    [low, high], or ``default`` when it is not given. Raises OptionError naming it. Shared by the read
    and the write options."""
    raw = opts.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not re.fullmatch(r"-?[0-9]{1,19}", text):
        try:
            float(text)
        except ValueError:
            raise OptionError(f"option {name}={raw!r} is not a number") from None
        raise OptionError(f"option {name}={raw!r} must be a whole number")
    value = int(text)
    if not low <= value <= high:
        raise OptionError(f"option {name}={raw!r} must be between {low} and {high}")
    return value


def _integer(opts: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    value = integer(opts, name, default, low, high)
    assert value is not None
    return value


def _endpoint(raw: str) -> str:
    try:
        parts = urlsplit(raw)
        port = parts.port  # a port that is not a number or out of range raises ValueError here
    except ValueError as exc:  # e.g. 'http://[::1' (Invalid IPv6 URL), 'http://h:abc', 'http://h:99999'
        raise OptionError(f"option endpoint={raw!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise OptionError(f"option endpoint={raw!r} must be an http:// or https:// URL with a host")
    if any(c.isspace() or not c.isprintable() for c in raw):
        raise OptionError(f"option endpoint={raw!r} holds a space or a control character")
    return raw.rstrip("/")


def _token(raw: str) -> str:
    """The bearer token, or "" for none. Its value is never put in an error: errors reach logs."""
    if raw and not _TOKEN.fullmatch(raw):
        raise OptionError(
            "option token must be printable ASCII without spaces or line breaks (its value is not shown; "
            "a secret read from a file often ends with a newline)"
        )
    return raw


def _report_path(raw: str | None) -> str | None:
    """The reportPath, checked writable now (parent directory exists and may be written; the file, if
    there, is a writable file), on the driver, where it is written: else the write would fail only once
    every row was sent."""
    if not raw:
        return None
    path = os.path.abspath(raw)
    parent = os.path.dirname(path)
    if os.path.isdir(path):
        raise OptionError(f"option reportPath={raw!r} is a directory; give a file")
    if not os.path.isdir(parent):
        raise OptionError(f"option reportPath={raw!r}: the directory {parent} does not exist")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise OptionError(f"option reportPath={raw!r}: the file cannot be written")
    if not os.path.exists(path) and not os.access(parent, os.W_OK | os.X_OK):
        raise OptionError(f"option reportPath={raw!r}: the directory {parent} cannot be written")
    return raw


def _send_topic(topic: str) -> str:
    """``topic`` if the sidecar sends to it, as its send path checks it; else OptionError naming the
    option and the sidecar's reason."""
    if not topic:
        raise OptionError("option topic is required")
    try:
        validate_batch_topic(topic)
    except InvalidMessageError as exc:
        raise OptionError(f"option topic={topic!r}: {exc}") from None
    return topic


def canonical(options: Mapping[str, str], known: set[str], what: str = "option") -> dict[str, str]:
    """Spark hands options over case-insensitively (often lower-cased): map them to our spelling, and
    refuse an unknown one naming it (and the closest known name)."""
    spelling = {name.lower(): name for name in known}
    out: dict[str, str] = {}
    for key, value in options.items():
        name = spelling.get(key.lower())
        if name is None:
            if key.lower() in _SPARK_OWN:
                continue
            close = difflib.get_close_matches(key.lower(), spelling, n=1, cutoff=0.75)
            hint = f"did you mean {spelling[close[0]]!r}? " if close else ""
            # Spark hands names over lower-cased: say so, or the user looks for a name they did not type
            lowered = " (Spark passes option names lower-cased)" if key == key.lower() != key.upper() else ""
            raise OptionError(f"unknown {what} {key!r}{lowered}; {hint}known: {', '.join(sorted(known))}")
        out[name] = value
    return out


def parse(options: Mapping[str, str]) -> WriteOptions:
    """Raises OptionError."""
    opts = canonical(options, KNOWN)
    topic = _send_topic(opts.get("topic", ""))
    job_id = opts.get("jobId")
    if job_id is not None and not _JOB_ID.fullmatch(job_id):
        raise OptionError(f"option jobId={job_id!r} must be 1-128 characters of [A-Za-z0-9._-]")
    ack = opts.get("ack")
    if ack is not None and ack not in ("broker", "spool"):
        raise OptionError(f"option ack={ack!r} must be 'broker' or 'spool'")
    for name in COLUMN_TYPES:
        if name in opts and not opts[name]:
            raise OptionError(f"option {name} is empty")
    backoff_max = _number(opts, "retryBackoffMax", 30.0, 0.0, 86_400.0)
    return WriteOptions(
        topic=topic,
        endpoint=_endpoint(opts.get("endpoint", DEFAULT_ENDPOINT)),
        token=_token(opts.get("token", "")),
        timeout_s=_number(opts, "timeout", 30.0, 0.001, 3600.0),
        batch_size=_integer(opts, "batchSize", DEFAULT_BATCH_SIZE, 1, 10_000),
        max_batch_bytes=_integer(opts, "maxBatchBytes", DEFAULT_BATCH_BYTES, 1024, 1 << 30),
        max_retries=_integer(opts, "maxRetries", 20, 0, 1_000_000),
        retry_backoff_s=_number(opts, "retryBackoff", min(0.5, backoff_max), 0.0, backoff_max),
        retry_backoff_max_s=backoff_max,
        job_id=job_id,
        ack=ack,
        report_path=_report_path(opts.get("reportPath")),
        columns={name: opts[name] for name in COLUMN_TYPES if name in opts},
    )


def _allowed(option: str, column_type: str) -> bool:
    if column_type in COLUMN_TYPES[option]:
        return True
    return option in AS_TEXT and (column_type in TEXT_FORMS or column_type.startswith("decimal("))


def check_schema(opts: WriteOptions, schema: Mapping[str, str]) -> WriteOptions:
    """Check the column options against ``schema`` (column -> DataType.simpleString()); fill in the
    default body column ("body" when there is one). Raises OptionError."""
    for name, column in opts.columns.items():
        if column not in schema:
            raise OptionError(f"option {name}: no column {column!r} (columns: {', '.join(schema)})")
        if not _allowed(name, schema[column]):
            allowed = " or ".join(
                COLUMN_TYPES[name] + (("an integer, boolean, decimal or date",) if name in AS_TEXT else ())
            )
            raise OptionError(
                f"option {name}: column {column!r} is {schema[column]}; it must be {allowed} "
                "(cast it, e.g. F.col(c).cast('string'))"
            )
    if "bodyColumn" not in opts.columns and schema.get("body") in COLUMN_TYPES["bodyColumn"]:
        return replace(opts, columns={**opts.columns, "bodyColumn": "body"})
    if "bodyColumn" not in opts.columns:
        for column, column_type in schema.items():
            cannot = (
                f"option bodyColumn is not given, so the body is the whole row as JSON, which cannot hold "
                f"column {column!r} ({column_type})"
            )
            if _NOT_JSON.search(column_type):
                raise OptionError(
                    f"{cannot}: cast it (e.g. F.col({column!r}).cast('string')), drop it, or give bodyColumn"
                )
            if keys := _NO_KEY_TEXT.search(column_type):
                raise OptionError(
                    f"{cannot}: its map keys ({keys[1]}) have no JSON text; convert them (e.g. "
                    f"F.transform_keys({column!r}, lambda k, v: k.cast('string'))), drop it, "
                    "or give bodyColumn"
                )
    return opts
