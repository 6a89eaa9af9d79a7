"""What DelayScheduler tells of what it sent: ``on_sent`` gets what a broker stored, not what was SPOOLED
(Rock-DMQ marks what on_sent gets and the other copies are dropped then); both leave the delay store
(recorded as sent: the local mode's status and pending count); and ``unrecorded`` says while "sent"
records wait for a store that refuses them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rocksidecar.delay import SPOOLED, DelayedMessage, DelayScheduler, DelayState
from rocksidecar.storage.status import StoredAt
from tests.delay.conftest import Harness, message


def _scheduler(
    h: Harness,
    publish: Callable[[list[DelayedMessage]], Awaitable[list[object]]],
    on_sent: Callable[[list[DelayedMessage]], None],
) -> DelayScheduler:
    h.scheduler = DelayScheduler(
        h.store, publish, sleep=h.clock.sleep, on_sent=on_sent,
        on_published=lambda lateness_s, _msg: h.lateness_s.append(lateness_s),
    )  # fmt: skip
    return h.scheduler


async def test_on_sent_gets_what_a_broker_stored_not_what_was_spooled(h: Harness) -> None:
    now = h.store.now_ms()
    for id_ in ("STORED", "SPOOLED"):
        await h.store.schedule(message(id_, now))
    where = StoredAt("broker-a", 0, 7, "OFFSET")

    async def publish(msgs: list[DelayedMessage]) -> list[object]:
        return [SPOOLED if m.id == "SPOOLED" else where for m in msgs]

    sent: list[str] = []
    await _scheduler(h, publish, lambda msgs: sent.extend(m.id for m in msgs)).start()
    await h.settle()
    assert sent == ["STORED"]  # the spooled one is not out yet: its replay tells (app.store_delivery)
    assert h.lateness_s == [0.0]  # lateness likewise: the stored one only
    for id_ in ("STORED", "SPOOLED"):  # both left the delay store: its status says SENT, none pending
        status = h.store.get(id_)
        assert status is not None and status.state is DelayState.SENT
    assert h.store.stats().pending == 0


async def test_a_call_that_was_all_spooled_tells_on_sent_nothing(h: Harness) -> None:
    await h.store.schedule(message("SPOOLED", h.store.now_ms()))

    async def publish(msgs: list[DelayedMessage]) -> list[object]:
        return [SPOOLED] * len(msgs)

    calls: list[list[DelayedMessage]] = []
    await _scheduler(h, publish, calls.append).start()
    await h.settle()
    assert calls == []


async def test_unrecorded_while_the_store_refuses_the_sent_record(h: Harness) -> None:
    await h.store.schedule(message("A", h.store.now_ms() + 100))
    scheduler = h.start(store_retry_s=1.0)
    await scheduler.start()
    await h.settle()
    assert not scheduler.unrecorded
    h.kv.write_fault = "disk full"
    await h.advance(0.1)  # published; its "sent" record refused
    assert h.ids() == ["A"] and scheduler.unrecorded
    h.kv.write_fault = None
    await h.advance(1.0)  # recorded at the retry
    assert not scheduler.unrecorded
