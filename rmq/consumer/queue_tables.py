"""Maps keyed by MessageQueue in the bodies brokers and clients exchange (ConsumerRunningInfo's
``mqTable``, ResetOffsetBody's and GetConsumerStatusBody's offset tables), as fastjson writes them: each
key a JSON object, ``{{"brokerName":"b","queueId":0,"topic":"T"}:12}``, which is not JSON. ``loads``
quotes those keys before parsing; ``queue_from_key`` reads one back; ``offset_table`` writes one.

What a broker sends is checked before it is used (rmq/route.py's rule): a table of more queues than a
route may hold, or an offset outside 0..2**63-1, refuses the whole body (FrameError).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from ..errors import FrameError
from ..message import MessageQueue
from ..protocol.numbers import INT64_MAX
from ..route import MAX_ROUTE_QUEUES
from .allocate import java_queue_key

# An object used as a map key: ``{"brokerName":...}`` right after ``{`` or ``,`` and followed by ``:``.
# Topic and broker names cannot contain braces, and a quote inside a string value is escaped, so this
# only matches fastjson's object keys.
_OBJECT_KEY = re.compile(r'([{,]\s*)(\{"(?:[^"\\]|\\.)*"\s*:[^{}]*\})(\s*:)')


def loads(body: bytes, what: str) -> Any:
    """The document, its object keys quoted (each still a JSON text: ``queue_from_key``); FrameError
    naming ``what`` if it is not such a document."""
    text = body.decode("utf-8", "replace")
    quoted = _OBJECT_KEY.sub(lambda m: m.group(1) + orjson.dumps(m.group(2)).decode() + m.group(3), text)
    try:
        return orjson.loads(quoted)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"undecodable {what}: {exc}") from exc


def queue_from_key(key: str) -> MessageQueue:
    """The MessageQueue a quoted key names (KeyError, TypeError, ValueError, JSONDecodeError if none)."""
    k = orjson.loads(key)
    return MessageQueue(str(k["topic"]), str(k["brokerName"]), int(k["queueId"]))


def offsets(table: Any, what: str) -> dict[MessageQueue, int]:
    """A ``Map<MessageQueue, Long>`` as ``loads`` gives it, or the C++ clients' list of MessageQueueForC
    (``{"topic", "brokerName", "queueId", "offset"}``, ResetOffsetBodyForC). FrameError naming ``what``
    for any other shape, more than MAX_ROUTE_QUEUES entries, or an offset outside 0..INT64_MAX."""
    try:
        if isinstance(table, dict):
            pairs = [(queue_from_key(key), value) for key, value in _bounded(table, what).items()]
        elif isinstance(table, list):
            pairs = [
                (MessageQueue(str(e["topic"]), str(e["brokerName"]), int(e["queueId"])), e["offset"])
                for e in _bounded(table, what)
            ]
        else:
            raise FrameError(f"{what}: the offset table is a {type(table).__name__}")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise FrameError(f"{what}: a queue of the offset table is not one: {exc}") from exc
    out: dict[MessageQueue, int] = {}
    for mq, offset in pairs:
        if type(offset) is not int or not 0 <= offset <= INT64_MAX:
            raise FrameError(f"{what}: offset {offset!r} of {mq} is not one")
        out[mq] = offset
    return out


def _bounded(table: Any, what: str) -> Any:
    if len(table) > MAX_ROUTE_QUEUES:
        raise FrameError(f"{what}: {len(table)} queues, more than a route holds ({MAX_ROUTE_QUEUES})")
    return table


def queue_json(mq: MessageQueue) -> bytes:
    """A MessageQueue as fastjson writes it (fields in alphabetical order)."""
    return orjson.dumps({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic})


def table_json(table: Mapping[MessageQueue, Any]) -> bytes:
    """``{key:value,...}``, keys as fastjson writes them, in Java's MessageQueue order (a TreeMap's; a
    HashMap's order is no promise, so any order reads back); values are JSON-serialisable (offsets,
    ProcessQueueInfo documents)."""
    items = (queue_json(mq) + b":" + orjson.dumps(table[mq]) for mq in sorted(table, key=java_queue_key))
    return b"{" + b",".join(items) + b"}"
