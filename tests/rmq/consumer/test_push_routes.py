"""Route refresh on the triggers that cannot wait for the 30 s timer: a subscribed topic without a
route (created after subscribing) and a send-back (the redelivery comes through the retry topic)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.errors import RouteNotFound, TopicNotExist
from rocksidecar.rmq.message import MessageExt
from rocksidecar.rmq.route import TopicRouteData
from rocksidecar.rmq.throttle import RepeatLog
from tests.rmq.consumer.helpers import FailingClient, Recorder, send_to_queues, wired


def config(group: str, **kw: object) -> ConsumerConfig:
    # A rebalance timer that never fires within a test: only the route triggers can make progress.
    kw.setdefault("rebalance_interval_s", 600.0)
    return ConsumerConfig(  # type: ignore[arg-type]
        group, instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET, **kw
    )


class RouteLookups:
    """The consumer's route requests by topic; ``hidden`` topics answer "no route" (as a topic the
    broker has not registered with the name server yet)."""

    def __init__(self, consumer: PushConsumer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: dict[str, int] = {}
        self.hidden: set[str] = set()
        self.changed = asyncio.Event()
        real = consumer.instance.get_route

        async def get_route(topic: str) -> TopicRouteData:
            self.asked[topic] = self.asked.get(topic, 0) + 1
            self.changed.set()
            if topic in self.hidden:
                raise RouteNotFound(f"no route for {topic} (hidden by the test)")
            return await real(topic)

        monkeypatch.setattr(consumer.instance, "get_route", get_route)

    async def until_asked(self, topic: str, times: int) -> None:
        async with asyncio.timeout(10.0):
            while self.asked.get(topic, 0) < times:
                self.changed.clear()
                await self.changed.wait()


async def test_a_topic_created_after_subscribing_is_asked_again_at_once_and_consumed(
    cluster: DevCluster, consumers: list[PushConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    consumer = PushConsumer(config("GR-late", route_retry_s=0.05), cluster.namesrv_addr, rec)
    lookups = RouteLookups(consumer, monkeypatch)
    consumer.subscribe("LateT")
    consumers.append(consumer)
    await consumer.start()  # the topic does not exist: no route, no queue
    assert "LateT" not in consumer._routes and not consumer.queues
    asked_at_start = lookups.asked["LateT"]
    await lookups.until_asked("LateT", asked_at_start + 1)  # the short back-off, not the 30 s timer
    keys = await send_to_queues(cluster, "LateT", 1, queues=1)  # the broker creates the topic
    await rec.until(lambda got: {m.uniq_key for m in got} == set(keys))
    assert {mq.topic for mq in consumer.queues} >= {"LateT"}


async def test_the_back_off_doubles_while_the_topic_has_no_route_and_resets_when_it_has(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    consumer = PushConsumer(config("GR-backoff", route_retry_s=1.0), cluster.namesrv_addr, Recorder())
    consumer.subscribe("NeverT")
    consumers.append(consumer)
    await consumer.start()
    waits = []
    for _ in range(7):
        waits.append(consumer._route_wait(30.0))
        await consumer._refresh_round()
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    consumer.unsubscribe("NeverT")
    consumer.subscribe("PresentT")
    await send_to_queues(cluster, "PresentT", 1, queues=1)
    await consumer._refresh_round()
    # No broker knew the group before; the new route's heartbeat made the retry topic, asked at once.
    assert "%RETRY%GR-backoff" in consumer._routes
    assert consumer._route_wait(30.0) == 30.0


async def test_a_send_back_refreshes_the_retry_topics_route_and_the_redelivery_comes_at_once(
    cluster: DevCluster, consumers: list[PushConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = await send_to_queues(cluster, "BackT", 1, queues=1)
    retry = "%RETRY%GR-back"
    lookups: RouteLookups

    def decide(m: MessageExt) -> ConsumeStatus:
        if m.reconsume_times == 0:
            lookups.hidden.discard(retry)  # the broker has registered the retry topic by now
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.SUCCESS

    rec = Recorder(decide)
    # route_retry_s at the full interval: only the send-back can make the retry route known in time.
    cfg = config("GR-back", route_retry_s=30.0)
    consumer = PushConsumer(cfg, cluster.namesrv_addr, rec)
    lookups = RouteLookups(consumer, monkeypatch)
    lookups.hidden.add(retry)
    consumer.subscribe("BackT")
    consumers.append(consumer)
    await consumer.start()
    assert retry not in consumer._routes
    asked_at_start = lookups.asked[retry]
    await rec.until(lambda got: [m.reconsume_times for m in got] == [0, 0, 1, 1] or len(got) >= 4)
    assert sorted(m.uniq_key or "" for m in rec.got if m.reconsume_times == 1) == sorted(keys)
    assert lookups.asked[retry] > asked_at_start
    assert consumer.stats["sent_back"] == len(keys)


async def test_200_failed_pulls_log_one_line_per_broker_then_a_summary(
    cluster: DevCluster, consumers: list[PushConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    keys = await send_to_queues(cluster, "PullT", 1, queues=1)
    now = [0.0]
    client = FailingClient()
    rec = Recorder()
    cfg = config("GR-pull", pull_delay_on_error_s=0.001)
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, rec, client=client), client)
    consumer.instance.repeat_log = log = RepeatLog(10.0, lambda: now[0])
    consumer.subscribe("PullT")
    consumers.append(consumer)
    caplog.set_level(logging.WARNING, "rocksidecar.rmq.consumer.push_consumer")
    client.fail[RequestCode.PULL_MESSAGE] = 200  # a broker down for a while, then back
    await consumer.start()
    await rec.until(lambda got: {m.uniq_key for m in got} == set(keys))
    pulls = [r.getMessage() for r in caplog.records if "pull of" in r.getMessage()]
    brokers = {mq.broker_name for mq in consumer.queues}
    assert len(pulls) == len(brokers) == 2  # 200 failures over 8 queues of 2 brokers: a line each
    now[0] = 10.0
    log.flush()
    summaries = [r.getMessage() for r in caplog.records if "more like this in 10 s" in r.getMessage()]
    counts = sorted(int(m.split(" ", 1)[0]) for m in summaries if "pull of" in m)
    assert len(counts) == 2 and sum(counts) == 200 - 2


async def test_a_restarted_name_server_does_not_take_away_the_queues_of_a_subscribed_topic(
    cluster: DevCluster, consumers: list[PushConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name server restarted empty answers TOPIC_NOT_EXIST for every topic until the brokers register
    # again (up to 30 s). The route and the queues held are kept through it (Java's rebalance keeps the
    # subscribe info its failed route update did not replace), and the brokers still get the heartbeat.
    await send_to_queues(cluster, "KeptT", 1, queues=1)
    consumer = PushConsumer(config("GR-kept"), cluster.namesrv_addr, Recorder())
    consumer.subscribe("KeptT")
    consumers.append(consumer)
    await consumer.start()
    held = {mq for mq in consumer.queues if mq.topic == "KeptT"}
    brokers = consumer.instance.broker_addrs()
    assert held and set(brokers) >= {mq.broker_name for mq in held}

    asked: list[str] = []

    async def restarted(topic: str) -> TopicRouteData:
        asked.append(topic)
        raise TopicNotExist(f"No topic route info in name server for the topic: {topic}", code=17)

    monkeypatch.setattr(consumer.instance.namesrv, "get_route", restarted)
    await consumer._refresh_round()
    await consumer.rebalance()
    await consumer.instance.heartbeat()
    assert "KeptT" in asked
    assert {mq for mq in consumer.queues if mq.topic == "KeptT"} == held
    assert "KeptT" in consumer._routes and consumer.instance.broker_addrs() == brokers
