"""A SENT done marker may say where the message was stored, and a SENT or CANCELLED one the message's topic
and due time (local mode's status names them, as service mode's does); markers written before either
still read, without what they lack."""

from __future__ import annotations

import orjson

from rocksidecar.delay import (
    SPOOLED,
    CancelOutcome,
    DelayedMessage,
    DelayScheduler,
    DelayState,
    DelayStatus,
    StoredAt,
)
from rocksidecar.delay.keys import CANCELLED, DONE_CF, SENT, done_value
from rocksidecar.storage.kv import Put
from tests.delay.conftest import Harness, message


async def test_where_a_message_was_sent_is_kept_and_old_markers_still_read(h: Harness) -> None:
    to = StoredAt("broker-b", 3, 41, "7F00000100002A9F0000000000012345")
    await h.store.record_sent(["W", "N"], [to, None])
    w, n = h.store.get("W"), h.store.get("N")
    assert w is not None and (w.state, w.sent_to, w.at_ms) == (DelayState.SENT, to, h.store.now_ms())
    assert n is not None and n.state is DelayState.SENT and n.sent_to is None
    h.kv.write([Put(DONE_CF, b"OLD", done_value(SENT, 1_700_000_000_000))], sync=True)  # the old format
    old = h.store.get("OLD")
    assert old is not None and (old.state, old.at_ms, old.sent_to) == (
        DelayState.SENT,
        1_700_000_000_000,
        None,
    )


def _kept(status: DelayStatus | None) -> tuple[object, ...]:
    """What a status says of a message that left the schedule."""
    assert status is not None
    return status.state, status.at_ms, status.sent_to, status.topic, status.due_ms


async def test_sent_and_cancelled_markers_keep_the_topic_and_the_due_time(h: Harness) -> None:
    now = h.store.now_ms()
    where = StoredAt("broker-a", 1, 9, "OFFSET")
    for id_, topic in (("OUT", "orders"), ("SPOOL", "invoices"), ("GONE", "refunds")):
        await h.store.schedule(message(id_, now + 50, topic))

    async def publish(msgs: list[DelayedMessage]) -> list[object]:
        return [SPOOLED if m.id == "SPOOL" else where for m in msgs]

    assert await h.store.cancel("GONE") is CancelOutcome.CANCELLED
    h.scheduler = DelayScheduler(h.store, publish, sleep=h.clock.sleep)
    await h.scheduler.start()
    await h.advance(0.05)
    sent_at = now + 50
    assert _kept(h.store.get("OUT")) == (DelayState.SENT, sent_at, where, "orders", now + 50)
    assert _kept(h.store.get("SPOOL")) == (DelayState.SENT, sent_at, None, "invoices", now + 50)
    assert _kept(h.store.get("GONE")) == (DelayState.CANCELLED, now, None, "refunds", now + 50)
    # The spooled one's replay records where it went in the end: its topic and due time stay.
    await h.store.record_sent(["SPOOL"], [where])
    assert _kept(h.store.get("SPOOL")) == (DelayState.SENT, sent_at, where, "invoices", now + 50)


async def test_markers_of_the_previous_version_read_without_topic_or_due_time(h: Harness) -> None:
    where = ["broker-b", 3, 41, "7F00000100002A9F0000000000012345"]
    h.kv.write(
        [
            Put(DONE_CF, b"OLD-S", done_value(SENT, 1_700_000_000_000, orjson.dumps(where))),
            Put(DONE_CF, b"OLD-C", done_value(CANCELLED, 1_700_000_000_001)),
        ],
        sync=True,
    )
    old_where = StoredAt("broker-b", 3, 41, "7F00000100002A9F0000000000012345")
    assert _kept(h.store.get("OLD-S")) == (DelayState.SENT, 1_700_000_000_000, old_where, None, None)
    assert _kept(h.store.get("OLD-C")) == (DelayState.CANCELLED, 1_700_000_000_001, None, None, None)
