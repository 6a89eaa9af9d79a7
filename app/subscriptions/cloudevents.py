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

from rocksidecar.rmq.message import MessageExt, MessageQueue

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


_second: tuple[int, str] = (-1, "")  # the last second formatted: a pull's messages share a few


def ce_time(ms: int) -> str:
    """RFC 3339 UTC with milliseconds, e.g. 2026-11-24T02:21:52.123Z."""
    global _second
    sec, milli = divmod(ms, 1000)
    if sec != _second[0]:
        _second = (sec, datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{milli:03d}Z"


# Attributes that are always plain ASCII (our names and numbers); the others may carry anything.
_PLAIN = {
    "specversion",
    "id",
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
    attrs = {
        "specversion": SPEC_VERSION,
        "id": msg.msg_id,  # UNIQ_KEY: the same on every redelivery, so the app can deduplicate
        "source": f"rocketmq://{mq.broker_name}/{msg.topic}",
        "type": EVENT_TYPE,
        "time": ce_time(msg.born_timestamp_ms),
        "rocketmqtopic": msg.topic,
        "rocketmqbroker": mq.broker_name,
        "rocketmqqueue": str(msg.queue_id),
        "rocketmqoffset": str(msg.queue_offset),
        "rocketmqreconsumetimes": str(msg.reconsume_times),
        "rocketmqgroup": group,
    }
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
    return attrs, content_type or "application/octet-stream"


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


def structured_event(msg: MessageExt, mq: MessageQueue, group: str) -> dict[str, object]:
    """Structured content mode (a bulk entry's event): the attributes and the data in one JSON object;
    JSON data as JSON, text as a string, anything else base64 in ``data_base64`` (byte-exact)."""
    attrs, content_type = attributes_for(msg, mq, group)
    event: dict[str, object] = {**attrs, "datacontenttype": content_type}
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
