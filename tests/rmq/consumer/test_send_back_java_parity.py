"""Review: what the push consumer does with a failed message, against Java 4.9.4's client (a group may mix
Java members and ours, so what reaches the broker must be what Java's would send)."""

from __future__ import annotations

import functools

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.helpers import FailingClient, Recorder, send_to_queues, start, wired

TOPIC = "ReviewBackT"


def config(group: str, **kw: object) -> ConsumerConfig:
    kw.setdefault("consume_from", ConsumeFrom.FIRST_OFFSET)
    return ConsumerConfig(group, instance_name="one", client_ip="127.0.0.1", **kw)  # type: ignore[arg-type]


def retry_copies(cluster: DevCluster, group: str, body: bytes) -> list[MessageExt]:
    return [m for b in cluster.brokers.values() for m in b.messages("%RETRY%" + group) if m.body == body]


async def test_a_send_back_after_a_failed_one_asks_the_brokers_delay_not_one_level_more(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """Java: a message whose send-back (and the producer fallback) failed is consumed again here with
    reconsumeTimes + 1 (processConsumeResult); when that fails too, sendMessageBack goes with
    delayLevelWhenNextConsume = 0 and the broker picks 3 + the reconsume times of *its stored copy* (0):
    level 3, 10 s. Ours sends 3 + the local count (1): level 4, 30 s."""
    await send_to_queues(cluster, TOPIC, 3, queues=1)
    poison = b"broker-a/0/1"
    calls = [0]

    def decide(m: MessageExt) -> ConsumeStatus:
        if m.body != poison:
            return ConsumeStatus.SUCCESS
        calls[0] += 1
        return ConsumeStatus.RECONSUME_LATER if calls[0] <= 2 else ConsumeStatus.SUCCESS

    rec = Recorder(decide)
    # The first send-back fails, and so does the fallback send, all 3 attempts of it (Java's sync send
    # makes 1 + retryTimesWhenSendFailed): the message is consumed again here.
    client = FailingClient(
        {RequestCode.CONSUMER_SEND_MSG_BACK: 1, RequestCode.SEND_MESSAGE: 3, RequestCode.SEND_MESSAGE_V2: 3}
    )
    cfg = config("GR-level", send_back_retry_s=0.01)
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, rec, client=client), client)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()
    await rec.until(lambda got: sum(1 for m in got if m.body == poison) >= 3)  # local, local, from %RETRY%
    copies = retry_copies(cluster, "GR-level", poison)
    assert len(copies) == 1
    # devbroker records the level it scheduled the copy with (DELAY), as 4.9.4's CommitLog does
    assert copies[0].properties.get("DELAY") == "3", copies[0].properties


async def test_a_failed_send_back_falls_back_to_sending_the_message_to_the_retry_topic(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """Java's DefaultMQPushConsumerImpl.sendMessageBack: when CONSUMER_SEND_MSG_BACK fails, the message
    is sent as a new one to %RETRY%group (RETRY_TOPIC, RECONSUME_TIME = reconsumeTimes + 1,
    MAX_RECONSUME_TIMES, ORIGIN_MESSAGE_ID, delay level 3 + reconsumeTimes) and the queue's offset moves
    past it. Ours keeps it in the process queue and retries it here every send_back_retry_s, for ever:
    no back-off, never the DLQ, and the queue's offset held at it."""
    keys = await send_to_queues(cluster, TOPIC, 3, queues=1)
    poison = b"broker-a/0/1"
    rec = Recorder(lambda m: ConsumeStatus.RECONSUME_LATER if m.body == poison else ConsumeStatus.SUCCESS)
    client = FailingClient({RequestCode.CONSUMER_SEND_MSG_BACK: 1_000_000})  # the broker refuses them
    cfg = config("GR-fallback", send_back_retry_s=0.01)
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, rec, client=client), client)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()
    await rec.until(lambda got: sum(1 for m in got if m.body == poison) >= 3 and len(got) >= 8)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    assert consumer.queues[mq].pq.committed_offset() == 3  # Java: past the poison, which is in %RETRY%
    copies = retry_copies(cluster, "GR-fallback", poison)
    assert copies, "nothing reached %RETRY%GR-fallback"
    first = copies[0].properties
    assert first.get("RETRY_TOPIC") == TOPIC
    assert first.get("ORIGIN_MESSAGE_ID") == keys[1]
    assert first.get("RECONSUME_TIME") == "1"
    assert first.get("MAX_RECONSUME_TIMES") == "16"
    assert first.get("DELAY") == "3"


async def test_orderly_by_default_never_gives_a_message_up_to_the_dlq(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """ConsumerConfig says its defaults are DefaultMQPushConsumer's: maxReconsumeTimes -1, which Java's
    ConsumeMessageOrderlyService.getMaxReconsumeTimes reads as Integer.MAX_VALUE: an orderly Java member
    suspends a failing message for as long as it fails and never skips it. Ours, with the default 16,
    sends it to %DLQ% after 17 attempts (17 s at the default 1 s suspend) and moves on."""
    await send_to_queues(cluster, TOPIC, 3, queues=1)
    stuck = b"broker-a/0/1"
    tries = [0]

    def decide(m: MessageExt) -> ConsumeStatus:
        if m.body != stuck:
            return ConsumeStatus.SUCCESS
        tries[0] += 1
        return ConsumeStatus.SUSPEND if tries[0] <= 20 else ConsumeStatus.SUCCESS

    rec = Recorder(decide)
    cfg = config("GR-orderly", orderly=True, suspend_orderly_s=0.001)  # max_reconsume_times: the default
    start_ = functools.partial(start, topic=TOPIC)
    await start_(consumers, cluster, cfg, rec)
    await rec.until(lambda got: any(m.body == b"broker-a/0/2" for m in got))
    assert tries[0] == 21  # suspended 20 times, then consumed, then the next message
    assert cluster.brokers["broker-a"].messages("%DLQ%GR-orderly") == []
