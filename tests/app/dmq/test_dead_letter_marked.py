"""A due delayed message whose publish was spooled and that the retry store then dead-letters (its ladder
exhausted, or refused as undeliverable) is marked, as one the replay published is: a dead letter is a
terminal outcome owned by this replica's operator (a re-drive publishes it), so the other holders drop
their copies. Unmarked, the other holder kept its copy turned away while the publisher was live and
published it once the publisher went away: a dead letter AND a publish. No brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocksidecar.app.dmq.service import DmqService
from rocksidecar.app.store_delivery import StoreDelivery
from rocksidecar.delay import SPOOLED, DelayedMessage, DelayScheduler, DelayState
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.redelivery import DEAD, DELIVERED, Redelivery
from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.errors import MessageIllegal
from rocksidecar.rmq.result import SendResult
from tests.app.dmq.test_replication_published import (
    ME,
    Brokers,
    _apply_marks,
    _live_replica,
    _service,
    _takeovers,
)
from tests.delay.conftest import SETTLE_S, message

NOW_MS = 1_700_000_000_000
FAR_MS = 4_000_000_000_000  # past any due time the retry store gives these records


class RefusingBrokers(Brokers):
    """Brokers: while ``down``, every send fails with ``error``."""

    def __init__(self, error: RocketMQError) -> None:
        super().__init__()
        self.error = error

    async def send_batch(
        self, messages: Sequence[Message], keys: Sequence[str | None], *, validated: bool = False
    ) -> list[SendResult | Exception]:
        if self.down:
            return [self.error for _ in messages]
        return await super().send_batch(messages, keys, validated=validated)


async def _replay(service: DmqService, delivery: StoreDelivery, policy: RetryPolicy) -> list[str]:
    """One pass of the retry store's replay over everything it holds (ReplayLoop's worker step)."""
    rows = service.retry.due(b"", FAR_MS, 100)
    run = Redelivery(service.retry, delivery.redeliver, lambda _type: policy, delivery.redeliver_batch)
    return await run.run(rows)


async def _published_by(service: DmqService, now_ms: int) -> list[str]:
    """What ``service``'s scheduler publishes, through its replica's gate, once everything due is done."""
    rep = service.replication
    assert rep is not None
    out: list[str] = []

    async def publish(msgs: list[DelayedMessage]) -> list[object]:
        out.extend(m.id for m in msgs)
        return [None] * len(msgs)

    scheduler = DelayScheduler(service.delay, publish)
    rep.attach(scheduler)
    await scheduler.start()
    try:
        await asyncio.wait_for(scheduler.wait_idle(), SETTLE_S)
    finally:
        await scheduler.close()
    return out


@pytest.mark.parametrize(
    ("error", "policy"),
    [
        (RocketMQError("no route to the broker"), RetryPolicy((1.0,), 0)),  # its ladder exhausted
        (MessageIllegal("the broker refuses it", code=13), RetryPolicy((1.0,), 10)),  # undeliverable
    ],
    ids=["exhausted", "refused"],
)
async def test_a_dead_lettered_spooled_message_is_not_published_by_the_other_holder(
    tmp_path: Path, error: RocketMQError, policy: RetryPolicy
) -> None:
    a = _service(tmp_path)
    now = [NOW_MS]
    a_rep = _live_replica(a, lambda: now[0])
    id_ = next(i for i in (f"id{n}" for n in range(1000)) if a_rep.replicas.holders(i)[0] == ME)
    b = _service(tmp_path, a_rep.replicas.holders(id_)[1])
    delivery = StoreDelivery(
        RefusingBrokers(error),  # type: ignore[arg-type]
        a.retry,
        a.delay,
        policy_for=lambda _topic: policy,
        now_ms=lambda: now[0],
        on_delayed_sent=a_rep.replayed,
    )
    try:
        copy = message(id_, now[0] - 5)
        await b.delay.schedule(copy)  # the other holder's copy, turned away while a publishes
        assert await delivery.publish_delayed([copy]) == [SPOOLED]
        assert await _replay(a, delivery, policy) == [DEAD]
        assert a.retry.dead_count == 1 and a.retry.get(id_) is not None

        marked = await _apply_marks(a_rep, b)
        state = b.delay.get(id_)
        assert id_ in marked and state is not None and state.state is DelayState.SENT, (
            f"a dead-lettered message not marked (marks {marked}): the other holder's copy is {state}"
        )
        assert _takeovers(a) == 0  # a dead letter is no publish

        # a goes away: b alone is live, and publishes what it still holds of a's share
        _live_replica(b, lambda: now[0])
        assert await _published_by(b, now[0]) == [], "a dead letter AND a publish by the other holder"
    finally:
        for s in (a, b):
            await s.delay.close()
            await s.writer.close()


async def test_a_marked_dead_letter_re_driven_is_published_and_marked_again(tmp_path: Path) -> None:
    """The mark leaves the dead letter to its operator: a re-drive publishes it (counted as a take-over
    then, once, where it is one) and marks it again, which the other holders take as done already."""
    a = _service(tmp_path)
    now = [NOW_MS]
    a_rep = _live_replica(a, lambda: now[0])
    id_ = next(i for i in (f"id{n}" for n in range(1000)) if a_rep.replicas.holders(i)[1] == ME)
    b = _service(tmp_path, a_rep.replicas.holders(id_)[0])  # the first holder, not live for a
    brokers = RefusingBrokers(RocketMQError("no route to the broker"))
    policy = RetryPolicy((1.0,), 0)
    delivery = StoreDelivery(
        brokers,  # type: ignore[arg-type]
        a.retry,
        a.delay,
        policy_for=lambda _topic: policy,
        now_ms=lambda: now[0],
        on_delayed_sent=a_rep.replayed,
    )
    try:
        copy = message(id_, now[0] - 5)
        await b.delay.schedule(copy)
        assert await delivery.publish_delayed([copy]) == [SPOOLED]
        assert await _replay(a, delivery, policy) == [DEAD]
        assert await _apply_marks(a_rep, b) == [id_]
        assert _takeovers(a) == 0

        brokers.down = False
        assert await a.retry.dead.redrive_id(id_) == 1
        assert await _replay(a, delivery, policy) == [DELIVERED]
        assert a.retry.dead_count == 0 and a.retry.pending_count == 0
        assert _takeovers(a) == 1  # published now, in place of the first holder
        assert set(await _apply_marks(a_rep, b)) == {id_}
        state = b.delay.get(id_)
        assert state is not None and state.state is DelayState.SENT
    finally:
        for s in (a, b):
            await s.delay.close()
            await s.writer.close()
