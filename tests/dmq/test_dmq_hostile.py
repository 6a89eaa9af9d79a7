"""Hostile inner messages on devbroker (issue 27, items 4 and 5): a bad one among good ones in one pulled
batch is skipped and counted, the good ones are published, nothing goes back to %RETRY%; the allow-list
of real topics."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.dmq import inner
from app.dmq.inner import Reject
from app.dmq.service import DmqOptions, DmqService
from devbroker import DevCluster
from rmq.message import Message
from rmq.msgid import new_uniq_id
from tests.dmq.conftest import (
    INNER_TOPIC,
    REAL_TOPIC,
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
