"""A RocketMQ message as a CloudEvent in HTTP binary content mode (CloudEvents 1.0 HTTP binding): the
body goes out untouched, the attributes travel as ``ce-*`` headers.

Extension attribute names must be lowercase letters and digits, so RocketMQ's fields become
``ce-rocketmq*``; a user property whose name is already such a name (and not a CloudEvents attribute)
becomes ``ce-<name>``, any other is carried in ``ce-rocketmqproperties`` as a JSON object.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime
from urllib.parse import quote

import orjson

from rocksidecar.rmq.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RESERVED_PROPERTIES,
    MessageExt,
    MessageQueue,
)

from ..bounded import remember
from ..http_client import CheckedLines
from ..tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY, from_headers

SPEC_VERSION = "1.0"
EVENT_TYPE = "org.apache.rocketmq.message"
CONTENT_TYPE_PROPERTY = "content-type"  # what the sidecar's send API stores (app.request)
_EXTENSION = re.compile(r"^[a-z0-9]{1,20}$")
# CloudEvents context attributes and our own extensions: a user property may not shadow them.
_RESERVED = {
    "id",
    "source",
    "specversion",
    "type",
    "datacontenttype",
    "dataschema",
    "subject",
    "time",
    "data",
}
_OURS = ("tags", "keys", "topic", "broker", "queue", "offset", "reconsumetimes", "group", "properties")
# The distributed-tracing extension: only the message's own trace context (valid) may take these names.
_TRACING = {"traceparent", "tracestate"}
RESERVED = _RESERVED | _TRACING | {"rocketmq" + x for x in _OURS}


def _header_value(text: str) -> str:
    """Header values must be printable ASCII; the binding says to percent-encode anything else."""
    return quote(text, safe=" !#$&'()*+,/:;=?@[]^_`{|}~-.<>\"\\")


# The last second formatted (a pull's messages share a few); none yet: no second is None (-1 was: the
# second before 1970, which a producer may say it was born in, then went out as ".999Z").
_second: tuple[int | None, str] = (None, "")
# RFC 3339's years, 0001 to 9999, in epoch milliseconds. A born timestamp is the producer's own number,
# any 64-bit value: one outside these years has no CloudEvents time (an optional attribute). It used to
# fail every delivery of the message (datetime's "year is out of range") until it was dead-lettered.
FIRST_MS, LAST_MS = -62_135_596_800_000, 253_402_300_799_999


def ce_time(ms: int) -> str | None:
    """RFC 3339 UTC with milliseconds, e.g. 2026-11-24T02:21:52.123Z; None outside years 1-9999."""
    global _second
    if not FIRST_MS <= ms <= LAST_MS:
        return None
    sec, milli = divmod(ms, 1000)
    if sec != _second[0]:
        # isoformat, not strftime: glibc's %Y writes the year 999 as "999", RFC 3339 wants four digits
        _second = (sec, datetime.fromtimestamp(sec, UTC).replace(tzinfo=None).isoformat())
    return f"{_second[1]}.{milli:03d}Z"


# Attributes that are always plain ASCII (our names and numbers); the others may carry anything.
_PLAIN = {
    "specversion",
    "source",
    "type",
    "time",
    "rocketmqtopic",
    "rocketmqbroker",
    "rocketmqqueue",
    "rocketmqoffset",
    "rocketmqreconsumetimes",
    "rocketmqgroup",
    "traceparent",
}


def attributes_for(msg: MessageExt, mq: MessageQueue, group: str) -> tuple[dict[str, str], str]:
    """The message's CloudEvents attributes (values as they are) and its data's content type."""
    time = ce_time(msg.born_timestamp_ms)
    attrs = {
        "specversion": SPEC_VERSION,
        "id": msg.msg_id,  # UNIQ_KEY: the same on every redelivery, so the app can deduplicate
        "source": f"rocketmq://{mq.broker_name}/{msg.topic}",
        "type": EVENT_TYPE,
        "time": time or "",
        "rocketmqtopic": msg.topic,
        "rocketmqbroker": mq.broker_name,
        "rocketmqqueue": str(msg.queue_id),
        "rocketmqoffset": str(msg.queue_offset),
        "rocketmqreconsumetimes": str(msg.reconsume_times),
        "rocketmqgroup": group,
    }
    if time is None:  # born outside RFC 3339's years (see FIRST_MS)
        del attrs["time"]
    if msg.tags:
        attrs["rocketmqtags"] = msg.tags
    if msg.keys:
        attrs["rocketmqkeys"] = " ".join(msg.keys)
    other: dict[str, str] = {}
    content_type = None
    properties = msg.user_properties
    if TRACEPARENT_PROPERTY in properties:
        _trace_attributes(attrs, properties)
    for name, value in sorted(properties.items()):
        if name in (TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY) and "traceparent" in attrs:
            continue  # carried as the tracing extension
        if name.lower() == CONTENT_TYPE_PROPERTY:
            content_type = value
        elif _EXTENSION.match(name) and name not in RESERVED:
            attrs[name] = value
        else:
            other[name] = value
    if other:
        attrs["rocketmqproperties"] = json.dumps(other, separators=(",", ":"))
    return attrs, _media_type(content_type)


def _media_type(value: str | None) -> str:
    """The producer's content type if it can be a header value as it is (printable ASCII); anything
    else, a line break above all, would let a producer write headers of its own into the POST."""
    if value and value.isascii() and value.isprintable():
        return value
    return "application/octet-stream"


def _trace_attributes(attrs: dict[str, str], properties: dict[str, str]) -> None:
    """The CloudEvents distributed-tracing extension (``traceparent``, ``tracestate``) from the trace
    context the message carries (app.tracing.context); one that does not parse stays a plain property."""
    ctx = from_headers(properties.get(TRACEPARENT_PROPERTY), properties.get(TRACESTATE_PROPERTY))
    if ctx is not None:
        attrs["traceparent"] = ctx.traceparent
        if ctx.tracestate is not None:
            attrs["tracestate"] = ctx.tracestate


def headers_for(msg: MessageExt, mq: MessageQueue, group: str) -> dict[str, str]:
    """Binary content mode: every attribute a ``ce-`` header, the data's type the Content-Type."""
    attrs, content_type = attributes_for(msg, mq, group)
    headers = {"ce-" + k: v if k in _PLAIN else _header_value(v) for k, v in attrs.items()}
    headers["content-type"] = content_type
    return headers


def encode_headers(headers: dict[str, str]) -> bytes:
    """Headers as the request carries them: ``name: value`` lines, latin-1 (what cannot be is ``?``)."""
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1", "replace")


def _escaped(text: str) -> bytes:
    """``_header_value`` as bytes, without calling it when it would change nothing (printable ASCII
    without ``%``, what tags and keys nearly always are)."""
    if text.isascii() and text.isprintable() and "%" not in text:
        return text.encode("ascii")
    return _header_value(text).encode("ascii")


def _has_line_break(text: str) -> bool:
    return "\r" in text or "\n" in text


_CONTENT_TYPE_ONLY = {CONTENT_TYPE_PROPERTY}
_OCTET_STREAM = b"application/octet-stream"
# group and queue lines, id, time (second and milliseconds), offset, reconsume count, tags and keys
# lines, content type
_MESSAGE_LINES = (
    b"%sce-id: %s\r\nce-time: %s.%03dZ\r\nce-rocketmqoffset: %d\r\nce-rocketmqreconsumetimes: %d\r\n"
    b"%scontent-type: %s\r\n"
)
MAX_CACHED_QUEUES = 4096  # per subscription; a subscription reads few topics' queues, bounded all the same
MAX_CACHED_TAGS = 1024  # per subscription: a topic's tags are few; a storm of distinct ones only clears it


class HeaderLines:
    """``encode_headers(headers_for(msg, mq, group))`` for one subscription's group, built straight as
    bytes: what is the same for every message of the group and queue (and of a tag, a second) is
    encoded once; a message adds its id, time, offset, reconsume count, tags, keys and content type.
    Messages with other user properties (extensions, ``rocketmqproperties``, trace context) take
    headers_for itself. On the push path the dict of headers_for and its encoding were a tenth of a
    delivery's CPU (issue 32); this method was still its largest piece (session 8)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._group_lines = (
            f"ce-specversion: {SPEC_VERSION}\r\nce-type: {EVENT_TYPE}\r\nce-rocketmqgroup: {group}\r\n"
        ).encode("latin-1", "replace")
        # the lines, and whether the names in them are free of CR and LF (see __call__)
        self._queues: dict[tuple[str, str, int], tuple[bytes, bool]] = {}
        self._tags: dict[str, bytes] = {}
        self._second: int | None = None  # the last second formatted (a pull's share a few), its bytes
        self._second_text = b""

    def _queue_lines(self, topic: str, broker: str, queue_id: int) -> tuple[bytes, bool]:
        """The group's lines and the queue's, and whether no name in them carries a CR or LF."""
        key = (topic, broker, queue_id)
        lines = self._queues.get(key)
        if lines is None:
            names = (
                f"ce-source: rocketmq://{broker}/{topic}\r\nce-rocketmqtopic: {topic}\r\n"
                f"ce-rocketmqbroker: {broker}\r\nce-rocketmqqueue: {queue_id}\r\n"
            ).encode("latin-1", "replace")
            clean = not any(_has_line_break(x) for x in (self.group, topic, broker))
            lines = remember(self._queues, key, (self._group_lines + names, clean), MAX_CACHED_QUEUES)
        return lines

    def _tag_line(self, tags: str) -> bytes:
        line = self._tags.get(tags)
        if line is None:
            line = remember(self._tags, tags, b"ce-rocketmqtags: %s\r\n" % _escaped(tags), MAX_CACHED_TAGS)
        return line

    def __call__(self, msg: MessageExt, mq: MessageQueue) -> bytes:
        props = msg.properties
        content_type: str | None = None
        if not RESERVED_PROPERTIES.issuperset(props):  # user properties: rare on the push path
            user = props.keys() - RESERVED_PROPERTIES
            if user != _CONTENT_TYPE_ONLY:
                return encode_headers(headers_for(msg, mq, self.group))
            content_type = _media_type(props[CONTENT_TYPE_PROPERTY])
        tags = props.get(PROPERTY_TAGS)
        optional = self._tag_line(tags) if tags else b""
        if props.get(PROPERTY_KEYS):
            keys = " ".join(msg.keys)
            if keys:
                optional += b"ce-rocketmqkeys: %s\r\n" % _escaped(keys)
        sec, milli = divmod(msg.born_timestamp_ms, 1000)
        if sec != self._second:
            text = ce_time(sec * 1000)
            if text is None:  # born outside RFC 3339's years: headers_for leaves the time out
                return encode_headers(headers_for(msg, mq, self.group))
            self._second_text = text[:-5].encode("ascii")  # without ".mmmZ"
            self._second = sec
        prefix, clean = self._queue_lines(msg.topic, mq.broker_name, msg.queue_id)
        msg_id = props.get(PROPERTY_UNIQ_KEY) or msg.offset_msg_id
        lines = _MESSAGE_LINES % (
            prefix,
            _escaped(msg_id),  # the producer's UNIQ_KEY: percent-encoded as the binding says
            self._second_text,
            milli,
            msg.queue_offset,
            msg.reconsume_times,
            optional,
            content_type.encode("ascii") if content_type else _OCTET_STREAM,
        )
        # Every line is ours and ends once: the numbers, the time, the escaped id, tags and keys and a
        # printable content type cannot break a line; the queue's names could (then the HTTP client's
        # check decides, as before).
        return CheckedLines(lines) if clean else lines


def structured_event(
    msg: MessageExt, mq: MessageQueue, group: str, *, as_bytes: bool = False
) -> dict[str, object]:
    """Structured content mode (a bulk entry's event): the attributes and the data in one JSON object;
    JSON data as JSON, text as a string, anything else base64 in ``data_base64`` (byte-exact).
    ``as_bytes``: base64 whatever the content type, for JSON data that cannot be written out again
    (nested deeper than orjson.dumps goes: see bulk.envelope)."""
    attrs, content_type = attributes_for(msg, mq, group)
    event: dict[str, object] = {**attrs, "datacontenttype": content_type}
    if not as_bytes:
        kind = content_type.split(";", 1)[0].strip().lower()
        try:
            if kind == "application/json" or kind.endswith("+json"):
                event["data"] = orjson.loads(msg.body)
                return event
            if kind.startswith("text/"):
                event["data"] = msg.body.decode()
                return event
        except (orjson.JSONDecodeError, UnicodeDecodeError):
            pass  # not what it says it is: carried as bytes
    event["data_base64"] = base64.b64encode(msg.body).decode()
    return event
