"""The push consumer on real RocketMQ 4.9.4 (issue 13 groundwork): every message delivered byte-exact
with its offsets committed; two members of a group split the queues with no overlap and no gap; a failed
message comes back from the broker's retry topic (level 3: after 10 s); orderly members hold disjoint
broker locks; `mqadmin resetOffsetByTime` on the live group redelivers from the start; `mqadmin
queryMsgById -g -d` resends one message to a member. Skipped unless ROCKSIDECAR_TEST_NAMESRV is set (see
conftest.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from rocksidecar.rmq import BrokerApi, Message, MessageQueue, NameServerClient, RemotingClient, new_uniq_id
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.consumer import (
    ConsumeFrom,
    ConsumerConfig,
    ConsumeStatus,
    MessageModel,
    PushConsumer,
    queue_tables,
)
from rocksidecar.rmq.message import MessageExt
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.realbroker.conftest import create_topic_everywhere, unique_topic
from tests.rmq.consumer.helpers import Recorder, settle

WAIT_S = 60.0  # a real broker's send-back delay level 3 is 10 s


@pytest.fixture
async def consumers() -> AsyncIterator[list[PushConsumer]]:
    made: list[PushConsumer] = []
    yield made
    for c in made:
        await c.close()


async def _topic_with_messages(
    namesrv_addr: str, client: RemotingClient, prefix: str, per_queue: int
) -> tuple[str, list[Message], list[MessageQueue]]:
    ns = NameServerClient(client, namesrv_addr)
    api = BrokerApi(client, producer_group="rs_consume_test")
    topic = unique_topic(prefix)
    route = await create_topic_everywhere(ns, api, topic)
    queues = route.subscribe_queues(topic)
    sent = []
    for mq in route.publish_queues(topic):
        for i in range(per_queue):
            msg = Message(
                topic,
                f"{mq.broker_name}/{mq.queue_id}/{i}".encode() * 3,
                tags="TagA",
                keys=(f"k{i}",),
                properties={"p": "ünï"},
                id=new_uniq_id(),
            )
            await api.send(route.master_addr(mq.broker_name) or "", mq, msg, msg.id or "", 10.0)
            sent.append(msg)
    return topic, sent, queues


def _queue_of(msg: MessageExt) -> MessageQueue:
    """The queue a message of ``_topic_with_messages`` was sent to, as its body says."""
    broker, queue_id, _ = msg.body.decode().split("/", 2)
    return MessageQueue(msg.topic, broker, int(queue_id))


def _config(group: str, name: str, **kw: object) -> ConsumerConfig:
    return ConsumerConfig(
        group,
        instance_name=f"{name}-{os.getpid()}",
        consume_from=ConsumeFrom.FIRST_OFFSET,
        **kw,  # type: ignore[arg-type]
    )


async def _start(
    made: list[PushConsumer], namesrv_addr: str, cfg: ConsumerConfig, topic: str, listener: Recorder
) -> PushConsumer:
    consumer = PushConsumer(cfg, namesrv_addr, listener)
    consumer.subscribe(topic, "TagA")
    made.append(consumer)
    await consumer.start()
    return consumer


async def _until(rec: Recorder, done: Callable[[list[object]], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not done(rec.got):  # type: ignore[arg-type]
            rec.changed.clear()
            await rec.changed.wait()


async def test_every_message_delivered_byte_exact_and_committed(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer]
) -> None:
    topic, sent, queues = await _topic_with_messages(namesrv_addr, client, "RsConsume", 5)
    group = f"rs_consume_{os.getpid()}_{topic[-8:]}"
    rec = Recorder()
    consumer = await _start(consumers, namesrv_addr, _config(group, "one"), topic, rec)
    await _until(rec, lambda got: len(got) >= len(sent))
    by_id = {m.uniq_key: m for m in rec.got}
    assert len(by_id) == len(sent)
    for msg in sent:
        got = by_id[msg.id]
        assert (got.topic, got.body, got.tags, got.keys) == (msg.topic, msg.body, msg.tags, msg.keys)
        assert got.user_properties == {"p": "ünï"}
    await consumer.close()
    api = BrokerApi(client)
    ns = NameServerClient(client, namesrv_addr)
    route = await ns.get_route(topic)
    for mq in queues:
        addr = route.master_addr(mq.broker_name) or ""
        assert await api.query_consumer_offset(addr, group, mq) == 5


async def test_a_broadcasting_consumer_past_the_end_is_moved_once_per_queue(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer], tmp_path: Path
) -> None:
    """Its offsets file says 500 for every queue of a topic holding 2 per queue: the broker moves each
    queue once (PULL_OFFSET_MOVED; 4.9.4 answers the queue's end, 2) and what is sent next is read once,
    the moved offsets kept in the file while the queues are dropped and added again."""
    topic, _old, queues = await _topic_with_messages(namesrv_addr, client, "RsMoved", 2)
    group = f"rs_moved_{os.getpid()}_{topic[-8:]}"
    rec = Recorder()
    cfg = _config(group, "one", message_model=MessageModel.BROADCASTING, offsets_dir=tmp_path)
    consumer = PushConsumer(cfg, namesrv_addr, rec)
    for mq in queues:
        consumer.offsets.update(mq, 500, increase_only=False)
    await consumer.offsets.persist_all(queues)
    consumer.subscribe(topic, "TagA")
    consumers.append(consumer)
    await consumer.start()
    await settle(consumer, lambda: len(consumer.queues) == len(queues) and all(
        s.pq.next_offset == 2 for s in consumer.queues.values()))  # fmt: skip
    api = BrokerApi(client, producer_group="rs_consume_test")
    route = await NameServerClient(client, namesrv_addr).get_route(topic)
    new = []
    for mq in queues:
        msg = Message(topic, f"{mq.broker_name}/{mq.queue_id}/new".encode(), tags="TagA", id=new_uniq_id())
        await api.send(route.master_addr(mq.broker_name) or "", mq, msg, msg.id or "", 10.0)
        new.append(msg.id)
    await _until(rec, lambda got: len(got) >= len(new))
    assert sorted(m.uniq_key for m in rec.got) == sorted(new)
    assert sorted(m.queue_offset for m in rec.got) == [2] * len(queues)
    assert consumer.stats["offsets_moved"] == len(queues)


async def test_two_members_split_the_queues_with_no_overlap_and_no_gap(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer]
) -> None:
    topic, sent, queues = await _topic_with_messages(namesrv_addr, client, "RsSplit", 2)
    group = f"rs_split_{os.getpid()}_{topic[-8:]}"
    a_rec, b_rec = Recorder(), Recorder()
    a = await _start(consumers, namesrv_addr, _config(group, "a"), topic, a_rec)
    b = await _start(consumers, namesrv_addr, _config(group, "b"), topic, b_rec)

    def mine(c: PushConsumer) -> set[MessageQueue]:
        return {mq for mq in c.queues if mq.topic == topic}

    await settle(a, lambda: len(mine(a)) == len(queues) // 2)
    await settle(b, lambda: len(mine(b)) == len(queues) // 2)
    assert mine(a).isdisjoint(mine(b)) and mine(a) | mine(b) == set(queues)
    sent_ids = {m.id for m in sent}

    def received() -> set[str | None]:
        return {m.uniq_key for m in a_rec.got + b_rec.got}

    async with asyncio.timeout(WAIT_S):
        while not sent_ids <= received():
            await asyncio.wait(
                [asyncio.ensure_future(a_rec.changed.wait()), asyncio.ensure_future(b_rec.changed.wait())],
                return_when=asyncio.FIRST_COMPLETED,
            )
            a_rec.changed.clear()
            b_rec.changed.clear()
    assert received() == sent_ids  # no gap
    # At least once, as with the Java client: a consumed some of b's queues before b joined, and b may
    # read such a queue's offset before a has persisted it. So a message may come once to each member,
    # never twice to the same one.
    for rec in (a_rec, b_rec):
        ids = [m.uniq_key for m in rec.got]
        assert len(ids) == len(set(ids))
    twice = {m.uniq_key for m in a_rec.got} & {m.uniq_key for m in b_rec.got}
    assert all(_queue_of(m) in mine(b) for m in a_rec.got if m.uniq_key in twice)


async def test_a_failed_message_comes_back_from_the_retry_topic(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer]
) -> None:
    topic, sent, _ = await _topic_with_messages(namesrv_addr, client, "RsBack", 1)
    group = f"rs_back_{os.getpid()}_{topic[-8:]}"
    first = sent[0].id
    rec = Recorder(
        lambda m: (
            ConsumeStatus.RECONSUME_LATER
            if m.uniq_key == first and m.reconsume_times == 0
            else ConsumeStatus.SUCCESS
        )
    )
    consumer = await _start(consumers, namesrv_addr, _config(group, "one"), topic, rec)
    await _until(rec, lambda got: any(m.uniq_key == first and m.reconsume_times == 1 for m in got))  # type: ignore[attr-defined]
    again = [m for m in rec.got if m.uniq_key == first and m.reconsume_times == 1]
    assert again[0].topic == topic and again[0].body == sent[0].body
    assert consumer.stats["sent_back"] == 1


async def test_orderly_members_hold_disjoint_broker_locks(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer]
) -> None:
    topic, _, queues = await _topic_with_messages(namesrv_addr, client, "RsOrder", 1)
    group = f"rs_order_{os.getpid()}_{topic[-8:]}"
    a = await _start(consumers, namesrv_addr, _config(group, "a", orderly=True), topic, Recorder())
    b = await _start(consumers, namesrv_addr, _config(group, "b", orderly=True), topic, Recorder())

    def mine(c: PushConsumer) -> set[MessageQueue]:
        return {mq for mq in c.queues if mq.topic == topic}

    await settle(a, lambda: len(mine(a)) == len(queues) // 2)
    # b could not lock a's queues before a released them: a queue leaves a's table before its unlock
    async with asyncio.timeout(WAIT_S):
        await a.stats.reach("queues_removed", len(queues) - len(queues) // 2)
    await b.rebalance()
    assert mine(a).isdisjoint(mine(b)) and mine(a) | mine(b) == set(queues)


async def _mqadmin(broker_ctl: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(broker_ctl), "java", "org.apache.rocketmq.tools.command.MQAdminStartup", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(WAIT_S):
        out, _ = await proc.communicate()
    return out.decode(errors="replace")


@pytest.mark.timeout(240)
async def test_mqadmin_resets_a_live_groups_offsets_and_a_broker_reads_its_status(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer], broker_ctl: Path
) -> None:
    """``mqadmin resetOffsetByTime`` on a group that is online leaves the reset to its members (each broker
    sends them RESET_CONSUMER_CLIENT_OFFSET, one-way): every message is consumed again from the start. A
    broker asked for the group's status (INVOKE_BROKER_TO_GET_CONSUMER_STATUS) reads the member's
    offsets (GET_CONSUMER_STATUS_FROM_CLIENT)."""
    topic, sent, queues = await _topic_with_messages(namesrv_addr, client, "RsReset", 2)
    group = f"rs_reset_{os.getpid()}_{topic[-8:]}"
    rec = Recorder()
    consumer = await _start(consumers, namesrv_addr, _config(group, "one"), topic, rec)
    await _until(rec, lambda got: len(got) >= len(sent))
    await consumer.persist_offsets()  # the brokers work the reset out from the group's committed offsets

    # mqadmin 4.9.4 no longer registers getConsumerStatus; DefaultMQAdminExt.getConsumeStatus's request
    route = await NameServerClient(client, namesrv_addr).get_route(topic)
    for broker in sorted({mq.broker_name for mq in queues}):
        ask = RemotingCommand(
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": topic, "group": group}
        )
        answer = await client.invoke(route.master_addr(broker) or "", ask, 10.0)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        members = queue_tables.loads(answer.body, "GetConsumerStatusBody")["consumerTable"]
        assert queue_tables.offsets(members[consumer.client_id], "member") == {mq: 2 for mq in queues}

    first = len(rec.got)
    out = await _mqadmin(
        broker_ctl, "resetOffsetByTime", "-n", namesrv_addr, "-g", group, "-t", topic, "-s", "0", "-f", "true"
    )
    assert "rollback consumer offset" in out, out
    await _until(rec, lambda got: len(got) >= first + len(sent))
    again = rec.got[first:]
    assert sorted((_queue_of(m), m.queue_offset) for m in again) == sorted(
        (mq, i) for mq in queues for i in range(2)
    )
    assert consumer.stats["offsets_reset"] == len(queues)


@pytest.mark.timeout(240)
async def test_mqadmin_resends_a_stored_message_to_a_live_member(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer], broker_ctl: Path
) -> None:
    """``mqadmin queryMsgById -i OFFSET_ID -g GROUP -d CLIENT`` (the Dashboard's "resend message"): the
    broker hands the stored message to that member (CONSUME_MESSAGE_DIRECTLY), its listener gets it once,
    and mqadmin prints Java's ConsumeMessageDirectlyResult."""
    topic, sent, _ = await _topic_with_messages(namesrv_addr, client, "RsDirect", 1)
    group = f"rs_direct_{os.getpid()}_{topic[-8:]}"
    rec = Recorder()
    consumer = await _start(consumers, namesrv_addr, _config(group, "one"), topic, rec)
    await _until(rec, lambda got: len(got) >= len(sent))
    target = rec.got[0]
    out = await _mqadmin(
        broker_ctl, "queryMsgById", "-n", namesrv_addr, "-i", target.offset_msg_id,
        "-g", group, "-d", consumer.client_id,
    )  # fmt: skip
    assert "consumeResult=CR_SUCCESS" in out and "order=false" in out, out
    assert len(rec.got) == len(sent) + 1
    again = rec.got[-1]
    assert (again.uniq_key, again.body, again.queue_offset) == (
        target.uniq_key,
        target.body,
        target.queue_offset,
    )


@pytest.mark.timeout(240)
async def test_mqadmin_consumer_status_prints_the_members_rates(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer], broker_ctl: Path
) -> None:
    """``mqadmin consumerStatus -g GROUP -i CLIENT -s`` reads the member's statusTable (pull and consume
    RT and TPS per subscribed topic) and its stacks (jstack) from our GET_CONSUMER_RUNNING_INFO answer."""
    topic, sent, _ = await _topic_with_messages(namesrv_addr, client, "RsRates", 4)
    group = f"rs_rates_{os.getpid()}_{topic[-8:]}"
    rec = Recorder()
    consumer = await _start(consumers, namesrv_addr, _config(group, "one"), topic, rec)
    await _until(rec, lambda got: len(got) >= len(sent))
    out = await _mqadmin(
        broker_ctl, "consumerStatus", "-n", namesrv_addr, "-g", group, "-i", consumer.client_id, "-s"
    )
    assert "#Consumer RT&TPS#" in out, out
    assert "#Consumer jstack#" in out and 'thread "MainThread"' in out, out[-3000:]
    rows = {parts[0]: parts[1:] for line in out.splitlines() if len(parts := line.split()) == 7}
    pull_rt, pull_tps, consume_rt, ok_tps, failed_tps, failed_msgs = (float(v) for v in rows[topic])
    assert pull_tps > 0 and ok_tps > 0 and failed_tps == 0 and failed_msgs == 0, out
    assert pull_rt >= 0 and consume_rt >= 0
    assert f"%RETRY%{group}" in rows, out


async def test_a_sparse_tag_filter_passes_the_commit_window_and_commits_past_what_it_skipped(
    namesrv_addr: str, client: RemotingClient, consumers: list[PushConsumer]
) -> None:
    # Each queue: 10 messages of another tag, then 2 of ours; a window of 4. Before, the window stayed at
    # the start offset + 4 (the broker's filter passes over the others, and nothing consumed moved it),
    # and ours, at offsets 10 and 11, never came.
    ns = NameServerClient(client, namesrv_addr)
    api = BrokerApi(client, producer_group="rs_consume_test")
    topic = unique_topic("RsSparse")
    route = await create_topic_everywhere(ns, api, topic)
    ours = []
    for mq in route.publish_queues(topic):
        for i in range(12):
            msg = Message(topic, f"{mq}/{i}".encode(), tags="TagA" if i >= 10 else "TagB", id=new_uniq_id())
            await api.send(route.master_addr(mq.broker_name) or "", mq, msg, msg.id or "", 10.0)
            if i >= 10:
                ours.append(msg.id)
    group = f"rs_sparse_{os.getpid()}_{topic[-8:]}"
    rec = Recorder()
    consumer = await _start(consumers, namesrv_addr, _config(group, "one", commit_window=4), topic, rec)
    await _until(rec, lambda got: len(got) >= len(ours))
    assert sorted(m.uniq_key or "" for m in rec.got) == sorted(ours)
    await consumer.close()
    for mq in route.subscribe_queues(topic):
        addr = route.master_addr(mq.broker_name) or ""
        assert await api.query_consumer_offset(addr, group, mq) == 12
