"""Logging set-up: the stdlib ``logging`` with one small formatter for text or JSON lines.

Structured events carry their fields as ``extra`` attributes of the record (``event`` names the event);
the JSON formatter writes every such attribute under its own stable name, the text formatter appends
them as ``key=value``. Message bodies are never passed to a log call.
"""

from __future__ import annotations

import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

from rocksidecar.rmq.throttle import (  # generic; it lives in the client, which imports nothing of ours
    MAX_CAUSES,
    Throttle,
)

from .tracing import spans

__all__ = ["FORMATS", "MAX_CAUSES", "JsonFormatter", "TextFormatter", "Throttle", "configure", "event_fields"]

# Attributes every LogRecord has; anything else on a record is an event field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's copy of the message with terminal colours
}
FORMATS = ("text", "json")


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, message, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields = event_fields(record)
        doc: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": fields.pop("event", "log"),
            "message": record.getMessage(),
            **fields,
        }
        if spans.ON and "trace_id" not in doc:  # logged inside a span of ours: its trace
            doc.update(spans.current_trace_fields())
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger: message key=value ...`` for humans.

    A message or a field value may hold a broker's or a client's text (an error remark, a broker name, a
    topic): its control characters are escaped (``\\n``, ``\\xNN``, ...), so one record stays one line
    and no text can start a forged one. A traceback keeps its lines, each indented below the record, so
    only a record's own first line starts at the margin."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        return _escape(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        head, newline, rest = line.partition("\n")  # the head is one line (escaped); a traceback below it
        if rest:
            rest = "\n".join(_TRACE_INDENT + _escape(part) for part in rest.split("\n"))
        fields = event_fields(record)
        if fields:
            head += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        return f"{head}{newline}{rest}"


_TRACE_INDENT = "  "
# what a terminal or a log shipper may take as a line break or an escape sequence: C0, DEL, C1 and the
# Unicode line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped_char(found: re.Match[str]) -> str:
    char = found.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escape(text: str) -> str:
    return _CONTROL.sub(_escaped_char, text)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    if text and " " not in text and '"' not in text and not _CONTROL.search(text):
        return text
    # quoted as a JSON string (its C0 characters escaped); then what JSON leaves raw: DEL, C1, U+2028/9
    return _escape(orjson.dumps(text).decode())


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Send every logger's records to ``stream`` (stderr) in ``fmt``; returns the handler installed."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
