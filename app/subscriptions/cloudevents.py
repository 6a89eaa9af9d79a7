"""A RocketMQ message as a CloudEvent in HTTP binary content mode (CloudEvents 1.0 HTTP binding): the
body goes out untouched, the attributes travel as ``ce-*`` headers.

Extension attribute names must be lowercase letters and digits, so RocketMQ's fields become
``ce-rocketmq*``; a user property whose name is already such a name (and not a CloudEvents attribute)
becomes ``ce-<name>``, any other is carried in ``ce-rocketmqproperties`` as a JSON object.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from urllib.parse import quote

from rmq.message import MessageExt, MessageQueue

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
RESERVED = _RESERVED | {"rocketmq" + x for x in _OURS}


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


def headers_for(msg: MessageExt, mq: MessageQueue, group: str) -> dict[str, str]:
    headers = {
        "ce-specversion": SPEC_VERSION,
        "ce-id": msg.msg_id,  # UNIQ_KEY: the same on every redelivery, so the app can deduplicate
        "ce-source": f"rocketmq://{mq.broker_name}/{msg.topic}",
        "ce-type": EVENT_TYPE,
        "ce-time": ce_time(msg.born_timestamp_ms),
        "ce-rocketmqtopic": msg.topic,
        "ce-rocketmqbroker": mq.broker_name,
        "ce-rocketmqqueue": str(msg.queue_id),
        "ce-rocketmqoffset": str(msg.queue_offset),
        "ce-rocketmqreconsumetimes": str(msg.reconsume_times),
        "ce-rocketmqgroup": group,
    }
    if msg.tags:
        headers["ce-rocketmqtags"] = _header_value(msg.tags)
    if msg.keys:
        headers["ce-rocketmqkeys"] = _header_value(" ".join(msg.keys))
    other: dict[str, str] = {}
    content_type = None
    for name, value in sorted(msg.user_properties.items()):
        if name.lower() == CONTENT_TYPE_PROPERTY:
            content_type = value
        elif _EXTENSION.match(name) and name not in RESERVED:
            headers["ce-" + name] = _header_value(value)
        else:
            other[name] = value
    if other:
        headers["ce-rocketmqproperties"] = _header_value(json.dumps(other, separators=(",", ":")))
    headers["content-type"] = content_type or "application/octet-stream"
    return headers
