"""Parity of devbroker with real Apache RocketMQ 4.9.4 where they once differed: the same raw request
against a one-broker DevCluster and against the real broker-a, and the parts of the answer the client
reads compared. They prove that devbroker, like 4.9.4,

- answers SEARCH_OFFSET_BY_TIMESTAMP for a time several messages share with the entry
  ConsumeQueue.getOffsetInQueueByTime's binary search hits first (not the earliest);
- keeps the batch header's properties, WAIT included, on every message of a batch;
- stores a batch sent to a %RETRY% topic;
- answers a pull without the subscription flag asking a newer subVersion than the heartbeat registered
  with SUBSCRIPTION_NOT_LATEST, and keeps a group's newest subscription when a member beats an older one;
- delays a sent-back message through SCHEDULE_TOPIC_XXXX for its delay level (devbroker at
  ``delay_scale=1.0``, RocketMQ's table) and delivers it with DELAY, REAL_TOPIC, REAL_QID and WAIT=false.

tests/devbroker guards the same behaviours without a real broker. Skipped unless
ROCKSIDECAR_TEST_NAMESRV is set (see conftest.py)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.codes import PULL_SUBSCRIPTION, PULL_SUSPEND, RequestCode
from rocksidecar.rmq.message_codec import decode_stored_all, encode_batch
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.devbroker import wire
from tests.realbroker.conftest import unique_topic, wait_for_brokers

pytestmark = pytest.mark.realbroker

Scenario = Callable[[RemotingClient, str, str], Awaitable[Any]]
_n = itertools.count()


def _topic(prefix: str = "DevParity") -> str:
    return f"{unique_topic(prefix)}_{next(_n)}"


async def _on_dev(scenario: Scenario, topic_prefix: str, delay_scale: float) -> Any:
    async with DevCluster(brokers=1, queues=4, delay_scale=delay_scale) as cluster:
        rc = RemotingClient()
        try:
            addr = cluster.brokers["broker-a"].addr
            topic = _topic(topic_prefix)
            await BrokerApi(rc).create_topic(addr, topic)
            return await scenario(rc, addr, topic)
        finally:
            await rc.close()


async def _on_real(namesrv_addr: str, scenario: Scenario, topic_prefix: str) -> Any:
    rc = RemotingClient()
    try:
        addr = (await wait_for_brokers(NameServerClient(rc, namesrv_addr)))["broker-a"]
        topic = _topic(topic_prefix)
        await BrokerApi(rc).create_topic(addr, topic)
        return await scenario(rc, addr, topic)
    finally:
        await rc.close()


async def both(
    namesrv_addr: str, scenario: Scenario, topic_prefix: str = "DevParity", *, delay_scale: float = 0.0
) -> tuple[Any, Any]:
    """(devbroker's answer, 4.9.4's); ``delay_scale`` 1.0 runs devbroker with RocketMQ's delay table."""
    dev = await _on_dev(scenario, topic_prefix, delay_scale)
    real = await _on_real(namesrv_addr, scenario, topic_prefix)
    return dev, real


async def call(
    rc: RemotingClient, addr: str, cmd: RemotingCommand, timeout_s: float = 10.0
) -> RemotingCommand:
    return await rc.invoke(addr, cmd, timeout_s)


async def max_offset(rc: RemotingClient, addr: str, topic: str, queue_id: int = 0) -> int:
    resp = await call(
        rc, addr, RemotingCommand(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    )
    return int(resp.ext_fields["offset"])


async def wait_max(rc: RemotingClient, addr: str, topic: str, at_least: int, queue_id: int = 0) -> int:
    for _ in range(100):  # the real broker's consume queue follows the commit log a moment later
        n = await max_offset(rc, addr, topic, queue_id)
        if n >= at_least:
            return n
        await asyncio.sleep(0.05)
    return n


def batch_cmd(topic: str, records: list[tuple[bytes, int, str]], queue_id: int = 0) -> RemotingCommand:
    cmd = wire.send(
        topic, queue_id, encode_batch(records), "WAIT\x01true", code=RequestCode.SEND_BATCH_MESSAGE
    )
    cmd.ext_fields["m"] = "true"  # SendMessageRequestHeaderV2.batch, as rmq's BrokerApi sends it
    return cmd


# SEARCH_OFFSET_BY_TIMESTAMP when several messages share the store time asked for -----------------------
async def test_search_offset_for_a_time_a_batch_shares_is_the_first_entry_the_search_hits(
    namesrv_addr: str,
) -> None:
    """A batch's messages share one store timestamp; ConsumeQueue.getOffsetInQueueByTime binary-searches
    and stops at the first entry it hits with that exact time, not the earliest: 2 for a batch of 5 at
    offsets 0..4. rmq/consumer/rebalance.py uses SEARCH_OFFSET for CONSUME_FROM_TIMESTAMP."""

    async def scenario(rc: RemotingClient, addr: str, topic: str) -> Any:
        records = [(b"m%d" % i, 0, "TAGS\x01a") for i in range(5)]
        assert (await call(rc, addr, batch_cmd(topic, records))).code == 0
        await wait_max(rc, addr, topic, 5)
        pulled = decode_stored_all((await call(rc, addr, wire.pull(topic, 0, 0))).body)
        stamps = {m.store_timestamp_ms for m in pulled}
        assert len(stamps) == 1
        ts = stamps.pop()
        header = {"topic": topic, "queueId": "0", "timestamp": str(ts)}
        resp = await call(rc, addr, RemotingCommand(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header))
        return resp.code, resp.ext_fields.get("offset")

    dev, real = await both(namesrv_addr, scenario)
    assert dev == real


# properties of the messages of a batch --------------------------------------------------------------------
async def test_batch_messages_keep_the_batch_properties_wait_included(namesrv_addr: str) -> None:
    """4.9.4 appends the batch header's properties (rmq sends "WAIT\\x01true") and CLUSTER to every inner
    message and keeps WAIT there, though it drops WAIT from a single message."""

    async def scenario(rc: RemotingClient, addr: str, topic: str) -> Any:
        records = [(b"a", 0, "TAGS\x01a\x02UNIQ_KEY\x01U1"), (b"b", 0, "TAGS\x01b\x02KEYS\x01k")]
        assert (await call(rc, addr, batch_cmd(topic, records))).code == 0
        await wait_max(rc, addr, topic, 2)
        msgs = decode_stored_all((await call(rc, addr, wire.pull(topic, 0, 0))).body)
        return [(m.queue_offset, m.body, sorted(m.properties.items())) for m in msgs]

    dev, real = await both(namesrv_addr, scenario)
    assert dev == real


# response codes -------------------------------------------------------------------------------------------
def _heartbeat(client_id: str, group: str, topic: str, sub_version: int) -> RemotingCommand:
    body = {
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "topic": topic,
                        "subString": "*",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": sub_version,
                        "expressionType": "TAG",
                    }
                ],
            }
        ],
    }
    return RemotingCommand(RequestCode.HEART_BEAT, {}, orjson.dumps(body))


async def _codes_pull_subscription_too_old(  # 4.9.4: SUBSCRIPTION_NOT_LATEST (25)
    rc: RemotingClient, addr: str, topic: str
) -> Any:
    group = topic + "_g2"
    assert (await call(rc, addr, _heartbeat(topic + "@c1", group, topic, 1000))).code == 0
    cmd = wire.pull(topic, 0, 0, group=group, sys_flag=0)
    cmd.ext_fields["subVersion"] = "2000"
    return (await call(rc, addr, cmd)).code


async def _codes_pull_after_an_older_heartbeat(  # 4.9.4 keeps the newer subscription: not 25
    rc: RemotingClient, addr: str, topic: str
) -> Any:
    group = topic + "_g3"
    assert (await call(rc, addr, _heartbeat(topic + "@c1", group, topic, 2000))).code == 0
    assert (await call(rc, addr, _heartbeat(topic + "@c2", group, topic, 1000))).code == 0
    cmd = wire.pull(topic, 0, 0, group=group, sys_flag=0)
    cmd.ext_fields["subVersion"] = "2000"
    return (await call(rc, addr, cmd)).code


async def _codes_batch_to_retry(  # 4.9.4 stores it (SUCCESS): its batch path has no retry/DLQ handling
    rc: RemotingClient, addr: str, topic: str
) -> Any:
    return (await call(rc, addr, batch_cmd("%RETRY%" + topic + "_g", [(b"a", 0, "TAGS\x01a")]))).code


ERROR_CASES: dict[str, Scenario] = {
    name.removeprefix("_codes_"): fn for name, fn in list(globals().items()) if name.startswith("_codes_")
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
async def test_response_codes(namesrv_addr: str, case: str) -> None:
    """The response code of each ``_codes_`` scenario above."""
    dev, real = await both(namesrv_addr, ERROR_CASES[case])
    assert dev == real


# CONSUMER_SEND_MSG_BACK: the delay level and the retry message's properties -------------------------------
async def test_send_back_waits_for_its_delay_level_and_keeps_the_schedule_properties(
    namesrv_addr: str,
) -> None:
    """4.9.4 puts a sent-back message through SCHEDULE_TOPIC_XXXX for its delay level (level 1: 1 s), so
    %RETRY%group is still empty right after the answer, and the delivered copy carries DELAY, REAL_TOPIC,
    REAL_QID and WAIT=false besides CLUSTER, RETRY_TOPIC, ORIGIN_MESSAGE_ID and the original's own.
    devbroker runs at ``delay_scale=1.0`` here (RocketMQ's delay table)."""

    async def scenario(rc: RemotingClient, addr: str, topic: str) -> Any:
        assert (await call(rc, addr, wire.send(topic, 0, properties="TAGS\x01a\x02KEYS\x01k"))).code == 0
        await wait_max(rc, addr, topic, 1)
        (msg,) = decode_stored_all((await call(rc, addr, wire.pull(topic, 0, 0))).body)
        group = topic + "_g"
        header = {"offset": str(msg.commit_log_offset), "group": group, "delayLevel": "1",
                  "originMsgId": msg.msg_id, "originTopic": topic, "unitMode": "false",
                  "maxReconsumeTimes": "16"}  # fmt: skip
        resp = await call(rc, addr, RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, header))
        retry = "%RETRY%" + group
        right_after = await max_offset(rc, addr, retry)
        # Long-poll the retry queue: the answer comes when the delayed copy arrives (or after 5 s).
        long_poll = wire.pull(
            retry, 0, 0, group=group, suspend_ms=5000, sys_flag=PULL_SUSPEND | PULL_SUBSCRIPTION
        )
        got = await call(rc, addr, long_poll)
        for _ in range(60):  # the real broker's consume queue follows its commit log a moment later
            if got.code == 0:
                break
            await asyncio.sleep(0.1)
            got = await call(rc, addr, wire.pull(retry, 0, 0, group=group))
        (back,) = decode_stored_all(got.body)
        waited = back.store_timestamp_ms - msg.store_timestamp_ms
        props = {k: v.replace(topic, "<topic>") for k, v in back.properties.items()}
        assert props.pop("ORIGIN_MESSAGE_ID") == msg.offset_msg_id
        return resp.code, right_after, back.reconsume_times, waited >= 1000, sorted(props.items())

    dev, real = await both(namesrv_addr, scenario, delay_scale=1.0)
    assert dev == real
