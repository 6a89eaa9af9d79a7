"""What operators' tools ask of a group that is online, on devbroker: its offsets reset (``mqadmin
resetOffsetByTime``, ``skipAccumulatedMessage``: the broker works out each of its queues' offsets and tells
every member, RESET_CONSUMER_CLIENT_OFFSET), its members' offsets read (GET_CONSUMER_STATUS_FROM_CLIENT)
and its rates (``mqadmin consumerStatus``'s statusTable); and what a reset that is not one does
(nothing)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from rocksidecar.rmq.consumer import queue_tables
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.consumer.running_info import owned_queues, stacks
from rocksidecar.rmq.message import MessageExt, MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import Recorder, send_to_queues, settle, start

TOPIC = "ResetT"
start_ = functools.partial(start, topic=TOPIC)
QUEUES = 4  # devbroker's queues per topic and broker


def config(group: str) -> ConsumerConfig:
    return ConsumerConfig(
        group, instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET
    )


async def ask(cluster: DevCluster, broker: str, code: int, fields: dict[str, str]) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(cluster.brokers[broker].addr, RemotingCommand(code, fields), 5.0)
    finally:
        await client.close()


async def reset(
    cluster: DevCluster, broker: str, group: str, timestamp: int, *, force: bool = True, topic: str = TOPIC
) -> RemotingCommand:
    """``mqadmin resetOffsetByTime``'s request to one broker."""
    fields = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()}
    return await ask(cluster, broker, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)


async def consumed_everything(
    cluster: DevCluster, consumers: list[PushConsumer], group: str, per_queue: int
) -> tuple[PushConsumer, Recorder]:
    """A consumer of ``group`` that has consumed ``per_queue`` messages of every queue of both brokers and
    committed its offsets (the broker's reset works from the group's committed offsets, as Java's)."""
    await send_to_queues(cluster, TOPIC, per_queue)
    rec = Recorder()
    consumer = await start_(consumers, cluster, config(group), rec)
    await rec.until(lambda got: len(got) >= 2 * QUEUES * per_queue)
    await consumer.persist_offsets()
    return consumer, rec


async def test_a_reset_by_time_redelivers_that_brokers_queues_from_the_offset_it_names(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    consumer, rec = await consumed_everything(cluster, consumers, "GR-back", 2)
    first = len(rec.got)
    answer = await reset(cluster, "broker-a", "GR-back", 0)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    table = queue_tables.offsets(queue_tables.loads(answer.body, "answer")["offsetTable"], "answer")
    assert table == {MessageQueue(TOPIC, "broker-a", q): 0 for q in range(QUEUES)}
    # broker-a's 8 messages again, from offset 0 of each of its queues; broker-b's not
    await rec.until(lambda got: len(got) >= first + 2 * QUEUES)
    again = rec.got[first:]
    assert sorted((m.queue_id, m.queue_offset) for m in again) == sorted(
        (q, i) for q in range(QUEUES) for i in range(2)
    )
    assert {m.body.decode().split("/")[0] for m in again} == {"broker-a"}
    assert consumer.stats["offsets_reset"] == QUEUES
    # and the group goes on from where it was (nothing more, then new messages once)
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    await rec.until(lambda got: len(got) >= first + 2 * QUEUES + 2)
    assert len(rec.got) == first + 2 * QUEUES + 2


async def test_an_unforced_reset_to_a_later_offset_keeps_the_committed_one(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    consumer, _ = await consumed_everything(cluster, consumers, "GR-keep", 1)
    answer = await reset(cluster, "broker-b", "GR-keep", -1, force=False)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    table = queue_tables.offsets(queue_tables.loads(answer.body, "answer")["offsetTable"], "answer")
    assert set(table.values()) == {1}  # the end and the committed offset are the same here: kept
    mq = MessageQueue(TOPIC, "broker-b", 0)
    assert await consumer.offsets.read(mq, ReadType.MEMORY) == 1


async def test_a_reset_of_a_group_nobody_runs_is_consumer_not_online(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 1)
    for q in range(QUEUES):
        cluster.brokers["broker-a"].offsets.commit("GR-gone", TOPIC, q, 1)
    answer = await reset(cluster, "broker-a", "GR-gone", 0)
    assert answer.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert "Consumer not online" in (answer.remark or "")
    missing = await reset(cluster, "broker-a", "GR-gone", 0, topic="NoSuchTopic")
    assert missing.code == ResponseCode.SYSTEM_ERROR and "no topic in this broker" in (missing.remark or "")


async def test_get_consumer_status_reads_each_members_offsets(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    consumer, _ = await consumed_everything(cluster, consumers, "GR-status", 1)
    answer = await ask(
        cluster,
        "broker-a",
        RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
        {"topic": TOPIC, "group": "GR-status"},
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    doc = queue_tables.loads(answer.body, "answer")
    assert list(doc["consumerTable"]) == [consumer.client_id]
    mine = queue_tables.offsets(doc["consumerTable"][consumer.client_id], "member")
    assert mine == {MessageQueue(TOPIC, b, q): 1 for b in ("broker-a", "broker-b") for q in range(QUEUES)}
    other = await ask(
        cluster, "broker-a", RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
        {"topic": TOPIC, "group": "GR-status", "clientAddr": "someone-else"},
    )  # fmt: skip
    assert orjson.loads(other.body)["consumerTable"] == {}


def reset_request(group: str, body: bytes, topic: str = TOPIC) -> RemotingCommand:
    fields = {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"}
    return RemotingCommand(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, fields, body, flag=FLAG_ONEWAY)


def java_body(table: dict[MessageQueue, Any]) -> bytes:
    return b'{"offsetTable":' + queue_tables.table_json(table) + b"}"


PEER: Any = SimpleNamespace(addr="127.0.0.1:10911")


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"offsetTable": 7}',
        b'{"offsetTable": {"not a queue": 0}}',
        b"[]",
        java_body({MessageQueue(TOPIC, "broker-a", 0): -1}),
        java_body({MessageQueue(TOPIC, "broker-a", 0): 1 << 63}),
        java_body({MessageQueue(TOPIC, "broker-a", 0): "0"}),
        java_body({MessageQueue(TOPIC, "broker-a", q): 0 for q in range(20_000)}),
        orjson.dumps(
            {"offsetTable": [{"topic": TOPIC, "brokerName": "broker-a", "queueId": 0}]}
        ),  # no offset
    ],
)
async def test_a_reset_that_is_not_one_changes_nothing_and_says_why(
    cluster: DevCluster, consumers: list[PushConsumer], body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    consumer, _ = await consumed_everything(cluster, consumers, "GR-bad", 1)
    before = {mq: await consumer.offsets.read(mq, ReadType.MEMORY) for mq in consumer.queues}
    with caplog.at_level(logging.WARNING):
        assert await consumer.on_broker_request(PEER, reset_request("GR-bad", body)) is None
    assert "refused" in caplog.text
    assert {mq: await consumer.offsets.read(mq, ReadType.MEMORY) for mq in consumer.queues} == before
    assert not any(state.pq.dropped for state in consumer.queues.values())
    assert consumer.stats["offsets_reset"] == 0


async def test_a_reset_takes_the_cpp_form_and_only_this_topics_queues_this_member_owns(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    consumer, rec = await consumed_everything(cluster, consumers, "GR-cpp", 1)
    first = len(rec.got)
    body = orjson.dumps(
        {
            "offsetTable": [
                {"topic": TOPIC, "brokerName": "broker-b", "queueId": 2, "offset": 0},
                {"topic": "OtherTopic", "brokerName": "broker-b", "queueId": 1, "offset": 0},
                {"topic": TOPIC, "brokerName": "broker-z", "queueId": 0, "offset": 0},  # not ours
            ]
        }
    )
    assert await consumer.on_broker_request(PEER, reset_request("GR-cpp", body)) is None
    assert consumer.stats["offsets_reset"] == 1
    await rec.until(lambda got: len(got) >= first + 1)
    (again,) = rec.got[first:]
    assert (again.body.decode().split("/")[0], again.queue_id, again.queue_offset) == ("broker-b", 2, 0)
    # a reset for another topic of the group's
    assert await consumer.on_broker_request(PEER, reset_request("GR-cpp", body, topic="OtherTopic")) is None
    assert consumer.stats["offsets_reset"] == 1


async def test_skip_accumulated_moves_a_busy_member_past_its_backlog(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """``mqadmin skipAccumulatedMessage`` is a forced reset to each queue's end (timestamp -1): a member
    whose listener is stuck on its backlog drops it, and once the listener returns goes on after it."""
    for q in range(QUEUES):  # the group has committed offsets (the broker's reset needs them)
        cluster.brokers["broker-a"].offsets.commit("GR-skip", TOPIC, q, 0)
    await send_to_queues(cluster, TOPIC, 2)
    gate, seen = asyncio.Event(), Recorder()

    async def stuck(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        await seen(msgs, mq)
        await gate.wait()
        return ConsumeStatus.SUCCESS

    cfg = dataclasses.replace(config("GR-skip"), consume_concurrency=1)  # one message at the listener
    consumer = await start_(consumers, cluster, cfg, stuck)
    await seen.until(lambda got: len(got) >= 1)
    answer = await reset(cluster, "broker-a", "GR-skip", -1)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    gate.set()  # the backlog's results come back to dropped queues: they move nothing
    mine = [MessageQueue(TOPIC, "broker-a", q) for q in range(QUEUES)]
    await settle(
        consumer, lambda: all(mq in consumer.queues and not consumer.queues[mq].pq.dropped for mq in mine)
    )
    before = len(seen.got)
    await send_to_queues(cluster, TOPIC, 1)
    await seen.until(lambda got: sum(m.body.startswith(b"broker-a") for m in got[before:]) >= QUEUES)
    again = [m for m in seen.got[before:] if m.body.startswith(b"broker-a")]
    assert sorted((m.queue_id, m.queue_offset) for m in again) == [(q, 2) for q in range(QUEUES)]
    # of broker-a's backlog of 8 the listener saw at most the one it was stuck on: the rest was skipped
    assert sum(m.body.startswith(b"broker-a") for m in seen.got[:before]) <= 1
    for q in range(QUEUES):
        assert await consumer.offsets.read(MessageQueue(TOPIC, "broker-a", q), ReadType.MEMORY) == 3


async def test_running_info_carries_each_subscribed_topics_rates(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """statusTable (mqadmin consumerStatus's "#Consumer RT&TPS#"): the topic's pulls and consumption, and
    the group's retry topic, as Java lists its subscriptions."""
    consumer, _ = await consumed_everything(cluster, consumers, "GR-rates", 3)
    body = consumer.running_info()
    table = orjson.loads(body[body.index(b'"statusTable":') + 14 : body.index(b',"subscriptionSet"')])
    assert sorted(table) == ["%RETRY%GR-rates", TOPIC]
    mine = table[TOPIC]
    assert mine["consumeOKTPS"] > 0 and mine["pullTPS"] > 0 and mine["consumeFailedMsgs"] == 0
    assert mine["consumeRT"] >= 0 and mine["pullRT"] >= 0
    assert table["%RETRY%GR-rates"]["consumeOKTPS"] == 0


async def test_an_orderly_member_gives_its_locks_back_and_consumes_the_reset_queues_in_order_again(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    await send_to_queues(cluster, TOPIC, 3)
    rec = Recorder()
    cfg = dataclasses.replace(config("GR-order"), orderly=True, suspend_orderly_s=0.01)
    consumer = await start_(consumers, cluster, cfg, rec)
    await rec.until(lambda got: len(got) >= 2 * QUEUES * 3)
    await consumer.persist_offsets()
    first = len(rec.got)
    answer = await reset(cluster, "broker-b", "GR-order", 0)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    await rec.until(lambda got: len(got) >= first + QUEUES * 3)
    again = rec.got[first:]
    for q in range(QUEUES):  # each of broker-b's queues from its start, in order
        assert [m.queue_offset for m in again if m.queue_id == q] == [0, 1, 2]
    assert {m.body.decode().split("/")[0] for m in again} == {"broker-b"}
    # the queues came back through the lock: removed (unlocked), locked again, then consumed
    assert all(state.pq.locked for mq, state in consumer.queues.items() if mq.broker_name == "broker-b")


async def test_consumer_status_with_jstack_shows_where_a_stuck_listener_waits(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """``mqadmin consumerStatus -s`` (jstackEnable): the answer carries the process's threads and the
    asyncio tasks' chains of awaits, so a listener stuck on the app shows where; bounded in size."""
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    gate, seen = asyncio.Event(), Recorder()

    async def waiting_for_the_app(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        await seen(msgs, mq)
        await gate.wait()
        return ConsumeStatus.SUCCESS

    consumer = await start_(consumers, cluster, config("GR-stack"), waiting_for_the_app)
    await seen.until(lambda got: len(got) >= 1)
    client = RemotingClient()
    try:
        fields = {"consumerGroup": "GR-stack", "clientId": consumer.client_id, "jstackEnable": "true"}
        cmd = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
        answer = await client.invoke(cluster.brokers["broker-a"].addr, cmd, 5.0)
    finally:
        await client.close()
        gate.set()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    jstack = queue_tables.loads(answer.body, "info")["jstack"]
    assert 'thread "MainThread"' in jstack and "in waiting_for_the_app" in jstack and "gate.wait()" in jstack
    assert owned_queues(answer.body, TOPIC) == set(consumer.queues) - {
        mq for mq in consumer.queues if mq.topic != TOPIC
    }
    assert b'"jstack"' not in consumer.running_info()  # only when asked
    short = stacks(limit=100)
    assert re.match(r"\d+ threads, \d+ asyncio tasks\n", short)
    assert short.endswith("more not shown (over 100 characters)\n")


async def test_jstack_stops_at_its_limit_however_many_tasks_wait() -> None:
    gate = asyncio.Event()
    waiting = [asyncio.create_task(gate.wait(), name=f"w{i:05d}") for i in range(5000)]
    await asyncio.sleep(0)
    try:
        text = stacks(limit=10_000)
    finally:
        gate.set()
        await asyncio.gather(*waiting)
    head, *_, tail = text.splitlines()
    counted = re.fullmatch(r"(\d+) threads, (\d+) asyncio tasks", head)
    assert counted is not None and int(counted[2]) > 5000 and len(text) < 10_000 + 100
    shown = text.count('thread "') + text.count('task "')  # the other tests may have left threads
    total = int(counted[1]) + int(counted[2])
    assert 0 < shown < total and tail == f"... {total - shown} more not shown (over 10000 characters)"
