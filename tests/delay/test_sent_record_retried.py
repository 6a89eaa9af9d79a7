"""A spooled delayed message's "sent" record, refused once and written again, must not overwrite where the
retry store's replay sent it meanwhile (session 30 review)."""

from __future__ import annotations

from rocksidecar.delay import SPOOLED, DelayedMessage, DelayScheduler, DelayState
from rocksidecar.storage.status import StoredAt
from tests.delay.conftest import Harness, message


async def test_a_retried_sent_record_of_a_spooled_message_does_not_undo_where_its_replay_sent_it(
    h: Harness,
) -> None:
    # A due message whose publish failed is SPOOLED into the retry store (app.store_delivery): the
    # scheduler records it as sent at once, without a "where"; the retry store's replay, once a broker
    # stores it, records it again with where it went (StoreDelivery._note_sent -> record_sent), and the
    # status answer shows that (README: SENT with sentAt, broker, queueId, queueOffset, msgId).
    # When the scheduler's own record was refused once (a store hiccup: it keeps it in memory and writes
    # it again every store_retry_s) and the replay records its publish in between, the scheduler's late
    # write overwrites the newer marker: the status says SENT at the spool time, with no broker, queue,
    # offset or msg id, for the whole retention.
    due = h.store.now_ms() + 100
    await h.store.schedule(message("A", due))

    async def publish(msgs: list[DelayedMessage]) -> list[object]:
        return [SPOOLED] * len(msgs)  # the broker is down: spooled into the retry store

    h.scheduler = DelayScheduler(h.store, publish, sleep=h.clock.sleep, store_retry_s=1.0)
    await h.scheduler.start()
    await h.settle()
    h.kv.write_fault = "disk full"  # the "sent" record of the spooled message is refused
    await h.advance(0.1)
    assert h.scheduler.unrecorded
    h.kv.write_fault = None  # the store takes writes again
    await h.advance(0.5)
    # The replay published it and records where (what StoreDelivery._note_sent does), before the
    # scheduler's next try of its own record.
    where = StoredAt("broker-a", 1, 42, "7F0000010001ABCD")
    replayed_at = h.store.now_ms()
    await h.store.record_sent(["A"], [where])
    await h.advance(1.0)  # the scheduler writes its refused record again
    assert not h.scheduler.unrecorded
    status = h.store.get("A")
    assert status is not None and status.state is DelayState.SENT
    # today: sent_to None and at_ms == due (the spool time): the replay's record is overwritten
    assert (status.sent_to, status.at_ms) == (where, replayed_at)
