"""Rock-DMQ inner messages after the wall clock was stepped back: their due times are wall times.

DMQ_DELIVER_MS and TIMER_DELIVER_MS are the producer's epoch ms, TIMER_DELAY_MS and TIMER_DELAY_SEC count
from the broker's store timestamp (a wall time too). The delay store's clock runs ahead of the wall clock
after a step back (storage.clock.SteadyClock), for good: the intake (app.dmq.consume, inner.due_ms) moves
them onto it by the store's ``lead_ms``, so none is published the step early.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.consume import InnerListener
from rocksidecar.app.dmq.inner import Rules
from rocksidecar.delay import DelayedMessage
from rocksidecar.rmq.consumer import ConsumeStatus
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.delay.conftest import Harness, make_harness, message
from tests.rmq.consumer.factory import stored

HOUR_MS = 3_600_000
RULES = Rules(90 * 24 * HOUR_MS)
QUEUE = MessageQueue("dmq_inner_topic", "b0", 0)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = make_harness()
    yield harness
    if harness.scheduler is not None:
        await harness.scheduler.close()
    await harness.store.close()
    await harness.writer.close()


def ext(offset: int, stored_ms: int, **props: str) -> MessageExt:
    m = stored(offset, topic="dmq_inner_topic")
    return dataclasses.replace(
        m, store_timestamp_ms=stored_ms, properties={**m.properties, inner.REAL_TOPIC: "orders", **props}
    )


async def test_inner_due_times_are_not_published_early_after_a_backward_step(h: Harness) -> None:
    """Stepped back an hour, three hours later and restarted: each inner message asks for wall-clock
    now + 30 min, one way or another. None goes out before then; all go out when the wall clock gets there."""
    await h.start().start()
    await h.settle()
    h.clock.step_wall(-HOUR_MS)
    await h.advance(3 * 3600.0)
    await h.store.schedule(message("LATER", h.clock.now_ms() + 24 * HOUR_MS))  # a busy store
    await h.restart()
    await h.settle()
    assert h.store.lead_ms() == HOUR_MS
    wall = h.clock.now_ms()
    at = wall + 30 * 60_000
    batch = [
        ext(1, wall, **{inner.DELIVER_MS: str(at)}),
        ext(2, wall, **{inner.TIMER_DELIVER_MS: str(at)}),
        ext(3, wall, **{inner.TIMER_DELAY_MS: str(30 * 60_000)}),  # from the broker's store time: wall
        ext(4, wall, **{inner.TIMER_DELAY_SEC: str(30 * 60)}),
        ext(5, 0, **{inner.TIMER_DELAY_MS: str(30 * 60_000)}),  # no store time: counted from now
    ]
    listener = InnerListener(h.store, RULES)
    assert await listener(batch, QUEUE) is ConsumeStatus.SUCCESS
    ids = [f"U{i:08d}" for i in range(1, 6)]
    assert {i: getattr(h.store.get(i), "due_ms", None) for i in ids} == dict.fromkeys(ids, at + HOUR_MS)
    await h.advance(1.0)
    assert h.ids() == [], f"published {(at - h.clock.now_ms()) / 60_000:.0f} min before their due time"
    await h.advance(30 * 60.0 - 2.0)
    assert h.ids() == []
    await h.advance(1.0)
    assert sorted(h.ids()) == ids


def test_without_a_lead_the_due_times_are_as_asked() -> None:
    """The usual case (the store's clock follows the wall clock): nothing changes."""
    now = 1_700_000_000_000
    m = ext(1, now - 5, **{inner.DELIVER_MS: str(now + 1000)})
    item = inner.parse(m, now, RULES)
    assert isinstance(item, DelayedMessage) and item.due_ms == now + 1000
    m = ext(2, now - 5, **{inner.TIMER_DELAY_MS: "1000"})
    item = inner.parse(m, now, RULES)
    assert isinstance(item, DelayedMessage) and item.due_ms == now + 995
