"""What a replica marks as published, and what it counts as a take-over (app.dmq.replication
``published``, ``replayed``): only what a broker stored, once per message. No brokers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from rocksidecar.app.config import Settings
from rocksidecar.app.dmq import beats, inner, marks
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.replication import Replication
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.app.store_delivery import StoreDelivery
from rocksidecar.app.wiring import COLUMN_FAMILIES
from rocksidecar.delay import SPOOLED, DelayedMessage, DelayScheduler, DelayState
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.result import SendResult, SendStatus
from rocksidecar.storage.memory import MemoryKV
from tests.delay.conftest import Harness, message
from tests.rmq.consumer.factory import stored

NAMES = ("dmq-0", "dmq-1", "dmq-2")
ME = NAMES[0]


def _service(tmp_path: Path, me: str = ME) -> DmqService:
    """A replica (not started: no broker) on a store in memory."""
    options = DmqOptions(replicas=",".join(NAMES), instance_name=me)
    settings = Settings(namesrv=("127.0.0.1:9",), data_dir=str(tmp_path / me))
    return DmqService(settings, options, kv=MemoryKV(COLUMN_FAMILIES))


def _live_replica(service: DmqService, now_ms: Callable[[], int]) -> Replication:
    """``service``'s Replication, converged, joined and hearing its own beats (on ``now_ms``'s clock)."""
    rep = service.replication
    assert rep is not None
    rep.beats._clock_ms = now_ms
    rep.presence.joined = True
    rep.beats.heard(beats.Beat(rep.replicas.me, now_ms()))
    return rep


def _takeovers(service: DmqService) -> float:
    return service.metrics.registry.get_sample_value("rocksidecar_dmq_takeover_published_total") or 0


async def _apply_marks(sender: Replication, holder: DmqService) -> list[str]:
    """What ``sender``'s MarkSender would put on the marks topic, applied by ``holder`` as it reads it;
    the ids marked."""
    ids, dues = list(sender.marks._ids), list(sender.marks._dues)
    if ids:
        mark = dataclasses.replace(
            stored(0, marks.encode(sender.marks.by, ids, dues), topic=marks.DEFAULT_MARKS_TOPIC),
            properties={inner.OP: marks.OP_MARK},
        )
        assert holder.replication is not None
        await holder.replication._apply([mark], holder.listener)
    return ids


class Brokers:
    """The producer's send_batch as StoreDelivery uses it: every send fails while ``down``."""

    def __init__(self) -> None:
        self.down = True

    async def send_batch(
        self, messages: Sequence[Message], _keys: Sequence[str | None], *, validated: bool = False
    ) -> list[SendResult | Exception]:
        if self.down:
            return [RocketMQError("no route to the broker") for _ in messages]
        mq = MessageQueue(messages[0].topic, "broker-a", 0)
        return [SendResult(SendStatus.SEND_OK, m.id or "", "OFFSET", mq, n) for n, m in enumerate(messages)]

    async def send(
        self, message: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        (result,) = await self.send_batch([message], [sharding_key], validated=validated)
        if isinstance(result, Exception):
            raise result
        return result


async def test_a_take_over_publish_retried_after_a_failure_is_counted_once(
    h: Harness, tmp_path: Path
) -> None:
    """rocksidecar_dmq_takeover_published_total "counts publishes in place of a holder ranked first that
    was not live" (README). It was counted at each yes of the gate (Replication.may_publish); the
    scheduler asks again at every retry of a failed publish, so one message taken over and published
    once after a failed try was counted twice. Now counted when a broker stored it (on_sent).
    (Review, session 29.)"""
    service = _service(tmp_path)
    rep = _live_replica(service, h.clock.now_ms)  # the first holder is not live (no others listed)
    id_ = next(i for i in (f"id{n}" for n in range(1000)) if list(rep.replicas.holders(i))[1:] == [ME])
    assert rep.replicas.holders(id_)[0] not in rep.presence.live and ME in rep.presence.live
    taken = _takeovers(service)

    await h.store.schedule(message(id_, h.clock.now_ms()))
    h.refuse.add(id_)  # the first publish fails (a broker down): held, retried after RETRY_S
    await h.start(gate=rep.may_publish, on_sent=rep.published).start()  # as Replication.attach wires them
    await h.settle()
    assert h.ids() == [] and h.calls == [1]
    assert _takeovers(service) == taken  # not published yet: nothing counted
    h.refuse.clear()
    rep.beats.heard(beats.Beat(ME, h.clock.now_ms()))  # its beats go on: still live at the retry
    await h.advance(1.0)
    assert h.ids() == [id_]  # published once, in place of the first holder

    counted = _takeovers(service) - taken
    assert counted == 1, f"one take-over publish counted {counted} times"


async def test_a_publish_that_was_only_spooled_is_not_marked_so_the_other_copy_survives(
    h: Harness, tmp_path: Path
) -> None:
    """README's failure table: "A replica's volume is lost | nothing lost: the others hold copies". The
    publisher marked every message of a publish call that "a broker (or the retry store) took": a due
    message no broker took (its broker down, a route missing) went to the publisher's own retry store,
    and its mark made the other holder drop its copy at once. The message then existed in one place, the
    publisher's retry store: that volume lost, it was lost; that replica crashed or frozen, nobody else
    published it. Now only what a broker stored is marked. (Review, session 29.)"""
    a = _service(tmp_path)
    a_rep = _live_replica(a, h.clock.now_ms)
    id_ = next(i for i in (f"id{n}" for n in range(1000)) if a_rep.replicas.holders(i)[0] == ME)
    b = _service(tmp_path, a_rep.replicas.holders(id_)[1])
    try:
        copy = message(id_, h.clock.now_ms())
        await h.store.schedule(copy)  # the publisher's copy
        await b.delay.schedule(copy)  # the other holder's copy

        async def spooled(msgs: list[DelayedMessage]) -> list[object]:
            return [SPOOLED] * len(msgs)  # no broker took it: kept in the publisher's retry store

        scheduler = DelayScheduler(h.store, spooled, sleep=h.clock.sleep)
        h.scheduler = scheduler
        a_rep.attach(scheduler)
        await scheduler.start()
        await h.settle()

        state = h.store.get(id_)
        assert state is not None and state.state is DelayState.SENT  # it left the publisher's delay store
        marked = await _apply_marks(a_rep, b)
        state = b.delay.get(id_)
        assert state is not None and state.state is DelayState.SCHEDULED, (
            f"the other holder's copy is {state}: dropped for a message no broker has yet "
            f"(marked {marked}), held only in the publisher's retry store"
        )
    finally:
        for s in (a, b):
            await s.delay.close()
            await s.writer.close()


async def test_a_spooled_publish_is_marked_once_the_replay_has_a_broker_store_it(tmp_path: Path) -> None:
    """The other copies are dropped once a broker has the message: when the retry store's replay publishes
    what the scheduler spooled (StoreDelivery's on_delayed_sent, wired by DmqService). A take-over
    spooled is counted then, once."""
    a = _service(tmp_path)
    now = [1_700_000_000_000]
    a_rep = _live_replica(a, lambda: now[0])
    id_ = next(i for i in (f"id{n}" for n in range(1000)) if a_rep.replicas.holders(i)[1] == ME)
    b = _service(tmp_path, a_rep.replicas.holders(id_)[0])  # the first holder, not live for a
    spools: list[RetryRecord] = []
    a.retry._on_spooled = spools.append
    brokers = Brokers()
    delivery = StoreDelivery(
        brokers,  # type: ignore[arg-type]
        a.retry,
        a.delay,
        policy_for=lambda _topic: RetryPolicy((1.0,), 10),
        now_ms=lambda: now[0],
        on_delayed_sent=a_rep.replayed,
    )
    try:
        copy = message(id_, now[0] - 5)
        await b.delay.schedule(copy)  # the other holder's copy
        assert await delivery.publish_delayed([copy]) == [SPOOLED]
        a_rep.published([])  # the scheduler's on_sent gets nothing of it (tests/delay/test_scheduler_sent)
        assert await _apply_marks(a_rep, b) == [] and _takeovers(a) == 0

        brokers.down = False
        (record,) = spools
        assert record.delay_due_ms == copy.due_ms  # how the replay knows it came from the delay store
        assert await delivery.redeliver_batch([record]) == [None]
        assert await _apply_marks(a_rep, b) == [id_]
        state = b.delay.get(id_)
        assert state is not None and state.state is DelayState.SENT  # dropped now: a broker has it
        assert _takeovers(a) == 1  # published in place of the first holder, counted once
        # DmqService wires it so: its scheduler and its replay deliver through one StoreDelivery
        wired = getattr(a.scheduler._publish, "__self__", None)
        assert isinstance(wired, StoreDelivery) and wired.on_delayed_sent == a_rep.replayed
    finally:
        for s in (a, b):
            await s.delay.close()
            await s.writer.close()


async def test_a_sidecar_s_own_replay_of_a_message_not_delayed_marks_nothing(tmp_path: Path) -> None:
    """Only records the delay scheduler spooled (with their due time) are delayed messages to mark."""
    a = _service(tmp_path)
    seen: list[list[RetryRecord]] = []
    brokers = Brokers()
    brokers.down = False
    delivery = StoreDelivery(
        brokers,  # type: ignore[arg-type]
        a.retry,
        a.delay,
        policy_for=lambda _topic: RetryPolicy((1.0,), 10),
        now_ms=lambda: 0,
        on_delayed_sent=seen.append,
    )
    try:
        plain = RetryRecord.of(message("plain", 0))
        assert plain.delay_due_ms == 0
        assert await delivery.redeliver_batch([plain]) == [None]
        await delivery.redeliver(plain)
        assert seen == []
    finally:
        await a.delay.close()
        await a.writer.close()
