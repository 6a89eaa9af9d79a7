"""devbroker against Apache RocketMQ 4.9.4, request by request (from the session 31 review): each test
states what a 4.9.4 broker does, with the Java file and line it comes from (tag rocketmq-all-4.9.4 of
github.com/apache/rocketmq), and checks that devbroker answers the same."""

from __future__ import annotations

import asyncio

import orjson

from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.schedule import SCHEDULE_TOPIC
from rocksidecar.devbroker.store import NewMessage, tag_code
from rocksidecar.devbroker.transactions import HALF_TOPIC
from rocksidecar.rmq.codes import PULL_SUBSCRIPTION, PULL_SUSPEND, RequestCode, ResponseCode
from rocksidecar.rmq.message import decode_properties
from rocksidecar.rmq.message_codec import decode_stored_all, pack_host
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.devbroker import wire

START_MS = 1_700_000_000_000
BORN_MS = 1_700_000_000_000  # the bornTimestamp wire.send puts in every send


class Clock:
    def __init__(self, ms: int = START_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


async def test_a_producers_delay_level_waits_in_schedule_topic_before_its_topic_sees_it(
    client: RemotingClient,
) -> None:
    """CommitLog.asyncPutMessage (store/.../CommitLog.java:621-640): a non-transactional message whose
    DELAY level is > 0 is stored in SCHEDULE_TOPIC_XXXX, queue level - 1, with REAL_TOPIC/REAL_QID, and
    reaches its topic only when ScheduleMessageService delivers it (level 3: 10 s later). The client's
    resend to %RETRY%<group> (push_consumer._resend_to_retry) relies on it: it sends DELAY 3 + reconsume
    times so the message is not redelivered at once."""
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        resp = await client.invoke(a.addr, wire.send("DelayT", 0, b"later", "TAGS\x01a\x02DELAY\x013"), 3.0)
        assert resp.code == ResponseCode.SUCCESS
        pulled = await client.invoke(a.addr, wire.pull("DelayT", 0, 0), 3.0)
        assert pulled.code == ResponseCode.PULL_NOT_FOUND, "4.9.4: nothing in DelayT before the 10 s pass"
        assert a.messages("DelayT") == []
        (scheduled,) = a.messages(SCHEDULE_TOPIC, 2)
        assert scheduled.properties["REAL_TOPIC"] == "DelayT"


async def test_a_committed_negative_offset_is_not_answered_as_the_consumers_offset(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """ConsumerManageProcessor.queryConsumerOffset (broker/.../ConsumerManageProcessor.java:129-150):
    only a stored offset >= 0 is answered as such; a negative one (committed by UPDATE_CONSUMER_OFFSET,
    which stores whatever it is given, :112) is treated as none: 0 while the queue starts at 0 and its
    first message is in memory, else QUERY_NOT_FOUND."""
    a = cluster.brokers["broker-a"]
    assert (await client.invoke(a.addr, wire.send("OffT", 0), 3.0)).code == ResponseCode.SUCCESS
    header = {"consumerGroup": "cg", "topic": "OffT", "queueId": "0"}
    update = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, {**header, "commitOffset": "-1"})
    assert (await client.invoke(a.addr, update, 3.0)).code == ResponseCode.SUCCESS
    resp = await client.invoke(a.addr, RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, dict(header)), 3.0)
    assert (resp.code, resp.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "0")


async def test_a_pull_with_an_unparsable_sql92_subscription_is_served_unfiltered(
    client: RemotingClient,
) -> None:
    """PullMessageProcessor with the subscription flag (broker/.../PullMessageProcessor.java:155-173):
    FilterAPI.build does not parse SQL92 (common/.../FilterAPI.java:66-82), and
    ConsumerFilterManager.build catches the parse error and returns null (ConsumerFilterManager.java:93-100;
    the ``assert`` at PullMessageProcessor.java:165 is off in a broker JVM). With enablePropertyFilter the
    pull then runs with no compiled expression, and ExpressionMessageFilter matches every message
    (ExpressionMessageFilter.java:84-86, 135-138): SUCCESS with the whole queue, not
    SUBSCRIPTION_PARSE_FAILED.
    The Spark source pulls this way (pipeline/broker_read.py, no CHECK_CLIENT_CONFIG first)."""
    async with DevCluster(brokers=1, enable_property_filter=True) as cluster:
        a = cluster.brokers["broker-a"]
        for v in ("1", "2"):
            cmd = wire.send("SqlT", 0, v.encode(), f"a\x01{v}")
            assert (await client.invoke(a.addr, cmd, 3.0)).code == ResponseCode.SUCCESS
        resp = await client.invoke(
            a.addr, wire.pull("SqlT", expression_type="SQL92", subscription="a >"), 3.0
        )
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        assert [m.body for m in decode_stored_all(resp.body)] == [b"1", b"2"]


async def test_a_long_polled_sql92_pull_stays_parked_when_a_non_matching_message_arrives(
    client: RemotingClient,
) -> None:
    """PullRequestHoldService.notifyMessageArriving (broker/.../longpolling/PullRequestHoldService.java:
    121-135): a held pull is woken only when the arriving message matches its filter by consume queue AND
    by commit log (for SQL92, the expression on the message's properties, :135-136); a non-matching one
    leaves it parked (:160), until a matching message, the suspend time, or the hold service's next
    5 s round (checkHoldRequest, which re-runs it without properties). Checked here at once after the
    non-matching send, well inside those 5 s."""
    async with DevCluster(brokers=1, enable_property_filter=True) as cluster:
        a = cluster.brokers["broker-a"]
        a.topics.ensure("LPSql", 1)
        cmd = wire.pull(
            "LPSql",
            sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND,
            expression_type="SQL92",
            subscription="a = 1",
            suspend_ms=20_000,
        )
        held = asyncio.create_task(client.invoke(a.addr, cmd, 30.0))
        barrier = RemotingCommand(RequestCode.GET_MAX_OFFSET, {"topic": "LPSql", "queueId": "0"})
        await client.invoke(a.addr, barrier, 3.0)
        assert len(a.holds) == 1
        send = wire.send("LPSql", 0, b"no", "a\x012")
        assert (await client.invoke(a.addr, send, 3.0)).code == ResponseCode.SUCCESS
        await client.invoke(a.addr, barrier, 3.0)
        parked = not held.done() and len(a.holds) == 1
        if not parked:
            resp = await held
            raise AssertionError(
                f"woken by a message its SQL92 filter refuses: code {resp.code} ({resp.remark}), "
                f"nextBeginOffset {resp.ext_fields.get('nextBeginOffset')}"
            )
        assert (await client.invoke(a.addr, wire.send("LPSql", 0, b"yes", "a\x011"), 3.0)).code == 0
        resp = await asyncio.wait_for(held, 3.0)
        assert [m.body for m in decode_stored_all(resp.body)] == [b"yes"]


async def test_a_filtered_pull_scans_maxmsgnums_entries_when_that_is_more_than_800(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """DefaultMessageStore.getMessage (store/.../DefaultMessageStore.java:617, 623): the consume-queue
    entries one pull looks at are max(16000 bytes, maxMsgNums * 20 bytes), i.e. max(800, maxMsgNums)
    entries; a pull of 1000 (pullBatchSize goes to 1024, pipeline/read_options.py) with a tag filter
    finds a match 801 entries on, where 800 entries would answer NO_MATCHED_MESSAGE."""
    a = cluster.brokers["broker-a"]
    a.topics.ensure("ScanT", 1)
    host = pack_host("127.0.0.1", 1)
    other = [NewMessage(b"x", 0, 0, BORN_MS, host, "TAGS\x01A", tag_code("A")) for _ in range(801)]
    a.store.put("ScanT", 0, other)
    a.store.put("ScanT", 0, [NewMessage(b"wanted", 0, 0, BORN_MS, host, "TAGS\x01B", tag_code("B"))])
    cmd = wire.pull("ScanT", subscription="B")
    cmd.ext_fields["maxMsgNums"] = "1000"
    resp = await client.invoke(a.addr, cmd, 3.0)
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert [m.body for m in decode_stored_all(resp.body)] == [b"wanted"]
    assert resp.ext_fields["nextBeginOffset"] == "802"


async def _half(client: RemotingClient, addr: str, born_ms: int = BORN_MS) -> None:
    cmd = wire.send("TxT", 0, b"half", "TAGS\x01t\x02TRAN_MSG\x01true\x02PGROUP\x01pg\x02UNIQ_KEY\x01U1")
    cmd.ext_fields["g"] = str(born_ms)
    assert (await client.invoke(addr, cmd, 3.0)).code == ResponseCode.SUCCESS


async def test_a_half_is_discarded_after_the_check_limit_even_with_its_producer_offline(
    client: RemotingClient,
) -> None:
    """TransactionalMessageServiceImpl.check (broker/.../queue/TransactionalMessageServiceImpl.java:
    190-195 with needDiscard :72-86, and :226-230): every round that picks an undecided half puts it back
    with TRANSACTION_CHECK_TIMES + 1 and hands it to resolveHalfMsg whether or not a producer of its group
    is online (sendCheckMessage only logs "channel is null"); the round after the 15th check
    (transactionCheckMax) discards it. So a half whose producer stays away for 16 rounds is gone."""
    clock = Clock()
    async with DevCluster(brokers=1, now_ms=clock, transaction_check_interval_s=0) as cluster:
        a = cluster.brokers["broker-a"]
        await _half(client, a.addr)
        assert len(a.messages(HALF_TOPIC)) == 1 and a.transactions.undecided() == 1
        for _ in range(20):  # 20 rounds of transactionCheckInterval (60 s), no producer heartbeat
            clock.ms += 60_000
            a.transactions.check_round()
        assert a.transactions.undecided() == 0, "4.9.4 discards it after 15 checks"


async def test_the_check_immunity_counts_from_the_born_time_not_the_store_time(
    client: RemotingClient,
) -> None:
    """TransactionalMessageServiceImpl.check (:196-224): a half stored before the round is checked once
    currentTime - bornTimestamp > transactionTimeout (6 s), or at once when that difference is negative
    (``valueOfCurrentMinusBorn <= -1``: the producer's clock runs ahead). The producer's bornTimestamp
    decides, not the broker's store time: with the producer's clock one hour behind, a half stored 1 ms
    ago is checked in the next round."""
    clock = Clock(BORN_MS + 3_600_000)  # the broker's clock: one hour ahead of the producer's
    async with DevCluster(brokers=1, now_ms=clock, transaction_check_interval_s=0) as cluster:
        a = cluster.brokers["broker-a"]
        beat = {"clientID": "p1", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": []}
        hb = RemotingCommand(RequestCode.HEART_BEAT, body=orjson.dumps(beat))
        assert (await client.invoke(a.addr, hb, 3.0)).code == ResponseCode.SUCCESS
        await _half(client, a.addr)
        clock.ms += 1
        assert a.transactions.check_round() == 1, "4.9.4 asks the producer in this round"


async def test_a_delayed_message_reaches_its_topic_when_due_with_its_level_capped(
    client: RemotingClient,
) -> None:
    """ScheduleMessageService delivers to REAL_TOPIC/REAL_QID once the level's delay has passed since the
    store time; a level above the table's is its last (CommitLog.java:625-627: 18, 2 h); a DELAY that
    is not an integer makes getDelayTimeLevel throw, which the broker answers SYSTEM_ERROR, nothing
    stored."""
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        for props in ("DELAY\x013", "DELAY\x0199"):
            assert (await client.invoke(a.addr, wire.send("DelayT", 1, b"x", props), 3.0)).code == 0
        bad = await client.invoke(a.addr, wire.send("DelayT", 1, b"x", "DELAY\x01soon"), 3.0)
        assert bad.code == ResponseCode.SYSTEM_ERROR and "DELAY" in (bad.remark or "")
        assert [m.properties["DELAY"] for m in a.messages(SCHEDULE_TOPIC, 17)] == ["18"]
        assert len(a.messages(SCHEDULE_TOPIC)) == 2
        clock.ms += 9_999
        assert a.schedule.deliver_due() == 0
        clock.ms += 1
        assert a.schedule.deliver_due() == 1
        (due,) = a.messages("DelayT", 1)
        assert (due.properties["REAL_TOPIC"], due.properties["REAL_QID"], due.properties["DELAY"]) == (
            "DelayT",
            "1",
            "3",
        )


async def test_a_delayed_message_is_delivered_at_once_at_delay_scale_0(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """DevCluster's default delay_scale 0 (what the suite runs) still routes a DELAY message through the
    schedule, and delivers it within the send."""
    a = cluster.brokers["broker-a"]
    assert (await client.invoke(a.addr, wire.send("DelayT", 0, b"now", "DELAY\x012"), 3.0)).code == 0
    assert [m.body for m in a.messages("DelayT", 0)] == [b"now"]
    assert [m.properties["REAL_TOPIC"] for m in a.messages(SCHEDULE_TOPIC, 1)] == ["DelayT"]


async def test_devbroker_a_delay_property_without_a_value_is_no_delay_as_the_broker_parses_properties(
    client: RemotingClient,
) -> None:
    """4.9.4 builds the message's property map with string2messageProperties, so "DELAY\\x01" (no value)
    is no property at all: getDelayTimeLevel() is 0 and the message is stored in its topic at once.
    devbroker read it as "" and refused the send SYSTEM_ERROR: a message 4.9.4 stores."""
    props = "TAGS\x01a\x02DELAY\x01"
    assert "DELAY" not in decode_properties(props)  # the project's own rule: no DELAY here
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        resp = await client.invoke(a.addr, wire.send("DelayT", 0, b"now", props), 3.0)
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
        assert [m.body for m in a.messages("DelayT", 0)] == [b"now"]
        assert a.messages(SCHEDULE_TOPIC) == []


async def test_devbroker_a_delay_java_cannot_parse_as_an_int_is_refused_not_scheduled(
    client: RemotingClient,
) -> None:
    """Python's int() takes what Java's Integer.parseInt
    (Message.getDelayTimeLevel, 4.9.4) throws NumberFormatException for: surrounding white space, digit
    group underscores, a value beyond 2^31 - 1. 4.9.4 answers each SYSTEM_ERROR and stores nothing, as
    devbroker does for "soon"; devbroker scheduled them (the last one at level 18,
    two hours), so a client bug that 4.9.4 reports is hidden in the fake."""
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        answers = {}
        for value in (" 3", "3_0", "99999999999"):
            resp = await client.invoke(a.addr, wire.send("DelayT", 0, b"x", f"DELAY\x01{value}"), 3.0)
            answers[value] = resp.code
        assert answers == dict.fromkeys((" 3", "3_0", "99999999999"), ResponseCode.SYSTEM_ERROR)
        assert a.messages(SCHEDULE_TOPIC) == [] and a.messages("DelayT") == []
