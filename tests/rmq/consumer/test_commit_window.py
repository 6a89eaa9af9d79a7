"""The commit window: no message reaches the listener at or beyond the broker's acknowledged offset plus
the window, so a SIGKILLed consumer redelivers at most the window per queue."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.commit_window import QueueWindow
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.factory import stored
from tests.rmq.consumer.helpers import FailingClient, Recorder, send_to_queues, start, wired

TOPIC = "WindowT"
WINDOW = 4
start_ = functools.partial(start, topic=TOPIC)


def config(group: str, **kw: object) -> ConsumerConfig:
    kw.setdefault("consume_from", ConsumeFrom.FIRST_OFFSET)
    kw.setdefault("commit_window", WINDOW)
    return ConsumerConfig(group, instance_name="one", client_ip="127.0.0.1", **kw)  # type: ignore[arg-type]


def test_the_window_admits_below_the_acknowledged_offset_plus_its_size() -> None:
    w = QueueWindow(4, persisted=10)
    assert [m.queue_offset for m in w.admit([stored(i) for i in range(10, 16)])] == [10, 11, 12, 13]
    assert not w.wants_persist(11)  # half a window not yet committed
    assert w.wants_persist(12)
    assert w.acknowledged(9) == []  # an older acknowledgement never moves it back
    assert [m.queue_offset for m in w.acknowledged(12)] == [14, 15]
    assert [m.queue_offset for m in w.admit([stored(16), stored(17)])] == []  # 16 = 12 + 4
    w.persisting = True
    assert not w.wants_persist(20)  # one persist in flight per queue


def test_a_window_of_zero_is_off() -> None:
    w = QueueWindow(0, persisted=0)
    assert len(w.admit([stored(i) for i in range(100)])) == 100
    assert not w.wants_persist(100)


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="commit_window"):
        ConsumerConfig("G", commit_window=-1)


class Checked(Recorder):
    """Asserts, on every call, that the message is below what the broker holds for the group plus the
    window: exactly what bounds the redeliveries after a crash."""

    def __init__(self, cluster: DevCluster, group: str) -> None:
        super().__init__()
        self.cluster, self.group, self.worst = cluster, group, -WINDOW

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        broker = self.cluster.brokers[mq.broker_name]
        for m in msgs:
            held = broker.offsets.query(self.group, TOPIC, mq.queue_id) or 0
            self.worst = max(self.worst, m.queue_offset - held)
        return await super().__call__(msgs, mq)


async def test_the_hand_out_follows_the_acknowledged_offset(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 40, queues=1)
    rec = Checked(cluster, "GW-follow")
    consumer = await start_(consumers, cluster, config("GW-follow"), rec)
    await rec.until(lambda got: len(got) >= 80)
    assert rec.worst < WINDOW  # never past the broker's offset + the window
    assert consumer.stats["window_persists"] >= 2 * 40 // WINDOW - 2  # each one opens a window at most


async def test_a_failing_persist_keeps_the_window_shut_until_it_succeeds(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 10, queues=1)
    client = FailingClient({RequestCode.UPDATE_CONSUMER_OFFSET: 10**6})
    rec = Recorder()
    cfg = config("GW-fail", pull_delay_on_error_s=0.001, persist_interval_s=3600.0)
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, rec, client=client), client)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()
    await rec.until(lambda got: len(got) >= 2 * WINDOW)
    await consumer.stats.reach("window_persist_errors", 20)  # tried again and again, never acknowledged
    assert len(rec.got) == 2 * WINDOW  # the window of each of the two queues, and not one more
    client.fail.clear()
    await rec.until(lambda got: len(got) >= 20)
    assert sorted(m.queue_offset for m in rec.got) == sorted(list(range(10)) * 2)
