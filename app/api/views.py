"""Outcomes as the JSON the HTTP API answers (camelCase, absent values left out)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import msgspec
import orjson

from rocksidecar.storage.status import StoredAtLike

from ..sidecar import SENT, AllSent, MessageState, Outcome
from . import problems
from .operations import BatchItem, item_label

_OUTCOME_FIELDS = (
    ("next_attempt_at_ms", "nextAttemptAt"),
    ("last_error", "lastError"),
    ("deliver_at_ms", "deliverAt"),
)

_STATUS_FIELDS = (
    ("topic", "topic"),
    ("attempts", "attempts"),
    ("next_attempt_at_ms", "nextAttemptAt"),
    ("deliver_at_ms", "deliverAt"),
    ("last_error", "lastError"),
    ("reason", "reason"),
    ("dead_at_ms", "deadAt"),
    ("sent_at_ms", "sentAt"),
    ("cancelled_at_ms", "cancelledAt"),
)


_ID_AND_STORED_AT = attrgetter("id", "stored_at")  # of an AllSent's Outcome: never None there
_NONE_OTHER = {"spooled": 0, "scheduled": 0, "rejected": 0, "failed": 0}


def _put_set(out: dict[str, Any], obj: object, fields: Sequence[tuple[str, str]]) -> None:
    """``obj``'s attributes that are set (not None, not empty) into ``out`` under their JSON names."""
    for attr, key in fields:
        value = getattr(obj, attr)
        if value is not None and value != "":
            out[key] = value


def where_view(to: StoredAtLike) -> dict[str, Any]:
    """Where the broker stored it, as a send's answer and a status name it."""
    return {
        "broker": to.broker,
        "queueId": to.queue_id,
        "queueOffset": to.queue_offset,
        "msgId": to.offset_msg_id,
    }


def outcome_view(o: Outcome, index: int | None = None) -> dict[str, Any]:
    to = o.stored_at
    if o.status is SENT and to is not None:  # the common case, built directly: one per message
        sent = {
            "index": index,
            "id": o.id,
            "status": "SENT",
            "broker": to.broker,
            "queueId": to.queue_id,
            "queueOffset": to.queue_offset,
            "msgId": to.offset_msg_id,
        }
        if index is None:
            del sent["index"]  # one dict either way: {"index": i, **sent} built two
        return sent
    out: dict[str, Any] = {} if index is None else {"index": index}
    out["id"], out["status"] = o.id, o.status.value
    if to is not None:
        out.update(where_view(to))
    _put_set(out, o, _OUTCOME_FIELDS)
    return out


class _SentItem(msgspec.Struct, gc=False, rename="camel"):
    """A SENT item of an all-SENT batch's answer: the keys, order and values of the general path's dict
    (outcome_view's), encoded by msgspec as orjson writes that dict (compact, the same escapes)."""

    index: int
    id: str
    status: str
    broker: str
    queue_id: int
    queue_offset: int
    msg_id: str


_encode = msgspec.json.Encoder().encode


def batch_view(results: Sequence[BatchItem]) -> dict[str, Any]:
    if type(results) is AllSent:  # the usual batch: every item SENT, stored where its SendResult says
        # Its items encoded here from the Outcomes and their SendResults: a Struct (C __init__) rather
        # than a 7-key dict each, the queue's fields read off it directly rather than through the
        # SendResult's StoredAtLike properties (the answer: 0.61 -> 0.34 us a message, issue 32). The
        # document stays a dict (the idempotency store reads its counts), its results a Fragment.
        encoded = _encode(
            [
                _SentItem(
                    i, id, "SENT", (q := to.queue).broker_name, q.queue_id, to.queue_offset, to.offset_msg_id
                )
                for i, (id, to) in enumerate(map(_ID_AND_STORED_AT, results))
            ]
        )
        return {"results": orjson.Fragment(encoded), "sent": len(results), **_NONE_OTHER}
    counts = {"sent": 0, "spooled": 0, "scheduled": 0, "rejected": 0, "failed": 0}

    def other(i: int, r: BatchItem) -> dict[str, Any]:
        label = item_label(r)
        counts[label.lower()] += 1
        if isinstance(r, Outcome):
            return outcome_view(r, i)
        return {"index": i, "status": label, "error": problems.from_exception(r)[1]}

    sent = SENT
    # A SENT item as one dict literal, in a comprehension: the usual batch is all of them (issue 32).
    items = [
        {
            "index": i,
            "id": r.id,
            "status": "SENT",
            "broker": to.broker,
            "queueId": to.queue_id,
            "queueOffset": to.queue_offset,
            "msgId": to.offset_msg_id,
        }
        if type(r) is Outcome and r.status is sent and (to := r.stored_at) is not None
        else other(i, r)
        for i, r in enumerate(results)
    ]
    counts["sent"] += len(items) - sum(counts.values())  # those the literal made
    return {"results": items, **counts}


def status_view(s: MessageState) -> dict[str, Any]:
    out: dict[str, Any] = {"id": s.id, "status": s.status.value}
    _put_set(out, s, _STATUS_FIELDS)
    if s.stored_at is not None:
        out.update(where_view(s.stored_at))
    return out
