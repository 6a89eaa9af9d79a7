"""Hostile inner messages on devbroker (issue 27, items 4 and 5): a bad one among good ones in one pulled
batch is skipped and counted, the good ones are published, nothing goes back to %RETRY%; the allow-list
of real topics; the service logs its spools and dead letters as the sidecar does."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.inner import Reject
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import PROPERTIES_MAX_BYTES, Message
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer import Producer
from tests.app.dmq.conftest import (
    INNER_TOPIC,
    REAL_TOPIC,
    WAIT_S,
    DmqStack,
    Received,
    dmq_settings,
    real_consumer,
)


def inner_msg(topic: str = REAL_TOPIC, **due: str) -> Message:
    props = {inner.REAL_TOPIC: topic, **(due or {inner.TIMER_DELAY_MS: "100"})}
    return Message(INNER_TOPIC, b"body", properties=props, id=new_uniq_id())


def rejected(service: DmqService, reason: Reject) -> float:
    return float(service.rejected.labels(reason.value)._value.get())


BAD = {
    Reject.TOO_FAR: [
        {inner.DELIVER_MS: "20000000000000000000"},  # orjson: "Integer exceeds 64-bit range"
        {inner.DELIVER_MS: "1" * 31},
        {inner.TIMER_DELAY_SEC: "9223372036854775807"},
    ],
    Reject.BAD_NUMBER: [
        {inner.DELIVER_MS: "\uff11\uff17" + "\uff10" * 11},  # full-width digits
        {inner.TIMER_DELAY_MS: "-5"},
        {inner.TIMER_DELAY_MS: " 5"},
        {inner.TIMER_DELAY_MS: "1_000"},
    ],
}
BAD_TOPICS = ["TBW102", "a b/../c", "x" * 200, "SCHEDULE_TOPIC_XXXX"]


async def test_bad_messages_in_a_batch_are_skipped_and_the_good_ones_published(stack: DmqStack) -> None:
    good = [inner_msg() for _ in range(3)]
    bad = [inner_msg(**due) for dues in BAD.values() for due in dues]
    bad += [inner_msg(topic) for topic in BAD_TOPICS]
    batch = [good[0], *bad[:4], good[1], *bad[4:], good[2]]
    # One queue, one SEND_BATCH: the inner consumer pulls them as one batch for one listener call.
    results = await stack.service.producer.send_batch(batch, ["one-queue"] * len(batch))
    assert len({r.queue for r in results if not isinstance(r, Exception)}) == 1, results
    await stack.received.until(lambda got: len(got) >= len(good))
    assert sorted(stack.received.ids()) == sorted(m.id or "" for m in good)
    service = stack.service
    for reason, dues in BAD.items():
        assert rejected(service, reason) == len(dues), reason
    assert rejected(service, Reject.BAD_TOPIC) == len(BAD_TOPICS)
    assert service.inner.labels("scheduled")._value.get() == len(good)
    assert service.consumer.stats["consume_failed"] == 0
    assert service.consumer.stats["sent_back"] == 0  # nothing went to %RETRY%
    assert service.retry.stats().pending == 0 and service.retry.stats().dead == 0


async def test_the_allow_list_keeps_real_topics_to_its_patterns(cluster: DevCluster, tmp_path: Path) -> None:
    settings = dataclasses.replace(
        dmq_settings(cluster.namesrv_addr, tmp_path / "dmq"), dmq_topics=("dmq_real_*", "audit")
    )
    options = DmqOptions(inner_topic=INNER_TOPIC, group="dmq_allow_group", http_addr="127.0.0.1:0")
    service = DmqService(settings, options)
    await service.start()
    received = Received()
    consumer = await real_consumer(cluster, received, "dmq_allow_reader")
    try:
        outside = [inner_msg("orders"), inner_msg("dmq_real"), inner_msg("audit_log")]
        allowed = inner_msg(REAL_TOPIC)
        batch = [*outside, allowed]
        await service.producer.send_batch(batch, ["one-queue"] * len(batch))
        await received.until(bool)
        assert received.ids() == [allowed.id]
        assert rejected(service, Reject.TOPIC_NOT_ALLOWED) == len(outside)
        assert service.consumer.stats["consume_failed"] == 0
    finally:
        await consumer.close()
        await service.stop()


class EventWaiter(logging.Handler):
    """The structured log events of a run; ``await until(event)`` returns once one was logged."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.changed.set()

    def of(self, event: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "event", None) == event]

    async def until(self, event: str) -> None:
        async with asyncio.timeout(WAIT_S):
            while not self.of(event):
                self.changed.clear()
                await self.changed.wait()


@pytest.fixture
def events() -> Iterator[EventWaiter]:
    waiter = EventWaiter()
    logger = logging.getLogger("rocksidecar.events")
    logger.addHandler(waiter)
    try:
        yield waiter
    finally:
        logger.removeHandler(waiter)


async def test_spools_and_dead_letters_are_logged_as_in_the_sidecar(
    stack: DmqStack, events: EventWaiter
) -> None:
    msg = inner_msg(**{inner.TIMER_DELAY_MS: "300"})
    await stack.service.producer.send(msg, sharding_key=msg.id)
    for broker in stack.cluster.brokers.values():  # from now on the brokers refuse it for good
        broker.faults.fail_all_sends(ResponseCode.MESSAGE_ILLEGAL, "devbroker: refused")
    await events.until("message_dead_lettered")
    (spooled,) = events.of("message_spooled")
    assert spooled.levelno == logging.WARNING
    assert (spooled.id, spooled.topic) == (msg.id, REAL_TOPIC)  # type: ignore[attr-defined]
    (dead,) = events.of("message_dead_lettered")
    assert dead.levelno == logging.ERROR
    assert (dead.id, dead.topic) == (msg.id, REAL_TOPIC)  # type: ignore[attr-defined]
    assert "refused" in dead.reason  # type: ignore[attr-defined]
    assert stack.service.metrics.dead_letters._value.get() == 1


async def test_a_message_that_could_not_be_published_is_refused_at_intake_not_dead_lettered_when_due(
    stack: DmqStack,
) -> None:
    """Its properties fit the broker's 32 767 bytes as sent to the inner topic, not once DELAY_DUE_AT and
    DELAY_PUBLISHED_AT are added: it was scheduled, then refused by the producer at the due time and
    dead-lettered (with its publish batch's neighbours, when it had some: the broker refuses the whole
    batch). Now it is skipped at intake (bad_message); its neighbour is published."""
    await send_fullest(stack.service.producer, inner_msg())
    good = inner_msg()
    await stack.service.producer.send(good)
    await stack.received.until(lambda got: len(got) >= 1)
    await stack.service.scheduler.wait_idle()
    assert stack.received.ids() == [good.id]
    assert rejected(stack.service, Reject.BAD_MESSAGE) == 1
    assert stack.service.retry.stats().dead == 0 and stack.service.retry.stats().pending == 0


async def send_fullest(producer: Producer, msg: Message) -> None:
    """``msg`` with a property ``p`` as long as the broker takes it, sent (the producer adds a few
    properties of its own, which its check does not count)."""
    for n in range(PROPERTIES_MAX_BYTES, 0, -1):
        full = Message(msg.topic, msg.body, properties={**msg.properties, "p": "v" * n}, id=msg.id)
        try:
            full.validate()
            await producer.send(full)
        except RocketMQError:  # InvalidMessageError here, MESSAGE_ILLEGAL from the broker
            continue
        return
    raise AssertionError("no room at all")
