"""CONSUMER_SEND_MSG_BACK's delay levels (devbroker/schedule.py): a sent-back message waits in
SCHEDULE_TOPIC_XXXX for its level's delay times the broker's ``delay_scale`` and then arrives in
%RETRY%<group> with DELAY, REAL_TOPIC, REAL_QID and WAIT=false, as 4.9.4 does
(tests/realbroker/test_devbroker_parity.py compares with a real broker). Timing runs on an injected
clock, or on a scale small enough that the test awaits the delivery itself (a long-polled pull)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevBroker, DevCluster
from rocksidecar.devbroker.cli import add_arguments
from rocksidecar.devbroker.schedule import DELAY_LEVELS_S, SCHEDULE_TOPIC, Schedule
from rocksidecar.rmq.codes import PULL_SUBSCRIPTION, PULL_SUSPEND, RequestCode, ResponseCode
from rocksidecar.rmq.message_codec import decode_stored_all
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.devbroker import wire

START_MS = 1_700_000_000_000


class Clock:
    """The brokers' ``now_ms``: store times and due times follow it, not the wall clock."""

    def __init__(self) -> None:
        self.ms = START_MS

    def __call__(self) -> int:
        return self.ms


async def sent_back(
    client: RemotingClient, broker: DevBroker, level: int, *, reconsume_times: int = 0, topic: str = "T"
) -> int:
    """Send one message to ``topic`` (with ``reconsume_times``), send it back for group cg at ``level``;
    returns the send-back's response code."""
    cmd = wire.send(topic, 0, b"work", "TAGS\x01a\x02KEYS\x01k")
    cmd.ext_fields["j"] = str(reconsume_times)
    assert (await client.invoke(broker.addr, cmd, 3.0)).code == ResponseCode.SUCCESS
    original = broker.messages(topic, 0)[-1]
    header = {"offset": str(original.commit_log_offset), "group": "cg", "delayLevel": str(level)}
    resp = await client.invoke(broker.addr, RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, header), 3.0)
    return resp.code


async def test_a_sent_back_message_waits_for_its_delay_level_on_the_brokers_clock(
    client: RemotingClient,
) -> None:
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        assert await sent_back(client, a, 1) == ResponseCode.SUCCESS
        (scheduled,) = a.messages(SCHEDULE_TOPIC, 0)  # level 1 -> queue 0
        assert a.messages("%RETRY%cg", 0) == [] and a.schedule.next_due_ms() == START_MS + 1000
        assert scheduled.properties["REAL_TOPIC"] == "%RETRY%cg" and scheduled.properties["DELAY"] == "1"
        clock.ms += 999
        assert a.schedule.deliver_due() == 0 and a.messages("%RETRY%cg", 0) == []
        clock.ms += 1
        assert a.schedule.deliver_due() == 1 and a.schedule.next_due_ms() is None
        (retry,) = a.messages("%RETRY%cg", 0)
        assert (retry.body, retry.reconsume_times, retry.store_timestamp_ms) == (b"work", 1, START_MS + 1000)
        props = dict(retry.properties)
        assert props.pop("ORIGIN_MESSAGE_ID") == a.messages("T", 0)[0].offset_msg_id
        assert props == {
            "TAGS": "a",
            "KEYS": "k",
            "CLUSTER": "DefaultCluster",
            "RETRY_TOPIC": "T",
            "WAIT": "false",
            "DELAY": "1",
            "REAL_TOPIC": "%RETRY%cg",
            "REAL_QID": "0",
        }
        assert a.schedule.deliver_due() == 0  # delivered once


@pytest.mark.parametrize(
    ("level", "reconsume_times", "expected"),
    [(0, 0, 3), (0, 4, 7), (2, 5, 2), (30, 0, 18), (0, 15, 18)],
)
async def test_the_delay_level_chosen(
    client: RemotingClient, level: int, reconsume_times: int, expected: int
) -> None:
    """0 asks the broker's choice, 3 + reconsume times; a level beyond the table is its last (2 h)."""
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        assert await sent_back(client, a, level, reconsume_times=reconsume_times) == ResponseCode.SUCCESS
        (scheduled,) = a.messages(SCHEDULE_TOPIC, expected - 1)
        assert scheduled.properties["DELAY"] == str(expected)
        assert a.schedule.next_due_ms() == START_MS + DELAY_LEVELS_S[expected - 1] * 1000


async def test_each_level_delivers_in_store_order_when_due(client: RemotingClient) -> None:
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        await sent_back(client, a, 2)  # due at +5 s
        clock.ms += 1000
        await sent_back(client, a, 1)  # due at +2 s
        await sent_back(client, a, 2)  # due at +6 s
        clock.ms = START_MS + 5000
        assert a.schedule.deliver_due() == 2
        assert [m.properties["DELAY"] for m in a.messages("%RETRY%cg", 0)] == ["1", "2"]
        clock.ms = START_MS + 6000
        assert a.schedule.deliver_due() == 1


async def test_a_scaled_delay_is_delivered_by_the_brokers_timer(client: RemotingClient) -> None:
    """delay_scale 0.02: level 1 waits 20 ms of the wall clock; a long-polled pull of the retry queue
    is answered when the broker's timer moves the message there."""
    async with DevCluster(brokers=1, delay_scale=0.02) as cluster:
        a = cluster.brokers["broker-a"]
        assert a.schedule.delays_ms[:3] == (20, 100, 200)
        assert await sent_back(client, a, 1) == ResponseCode.SUCCESS
        pull = wire.pull("%RETRY%cg", 0, 0, sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND, suspend_ms=10_000)
        resp = await client.invoke(a.addr, pull, 15.0)
        assert resp.code == ResponseCode.SUCCESS
        (retry,) = decode_stored_all(resp.body)
        (scheduled,) = a.messages(SCHEDULE_TOPIC, 0)
        assert retry.store_timestamp_ms - scheduled.store_timestamp_ms >= 20


async def test_scale_zero_redelivers_within_the_send_back(
    cluster: DevCluster, client: RemotingClient
) -> None:
    """DevCluster's default: the copy is in %RETRY% before the answer, through SCHEDULE_TOPIC_XXXX."""
    a = cluster.brokers["broker-a"]
    assert a.schedule.delays_ms == (0,) * 18
    assert await sent_back(client, a, 18) == ResponseCode.SUCCESS
    assert [m.properties["DELAY"] for m in a.messages("%RETRY%cg", 0)] == ["18"]
    assert len(a.messages(SCHEDULE_TOPIC, 17)) == 1 and a.schedule.next_due_ms() is None


async def test_a_restart_neither_loses_nor_repeats_scheduled_messages(
    tmp_path: Path, client: RemotingClient
) -> None:
    clock = Clock()
    async with DevCluster(brokers=1, data_dir=tmp_path, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        await sent_back(client, a, 1)
        await sent_back(client, a, 4)  # 30 s
        clock.ms += 1000
        assert a.schedule.deliver_due() == 1
    assert (tmp_path / "broker-a" / "delayOffset.json").is_file()
    clock.ms += 30_000  # the level-4 message fell due while the broker was down
    async with DevCluster(brokers=1, data_dir=tmp_path, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        assert [m.properties["DELAY"] for m in a.messages("%RETRY%cg", 0)] == ["1", "4"]  # on start
    async with DevCluster(brokers=1, data_dir=tmp_path, delay_scale=1.0, now_ms=clock) as cluster:
        assert len(cluster.brokers["broker-a"].messages("%RETRY%cg", 0)) == 2


async def test_what_fell_due_while_stopped_is_delivered_on_start(client: RemotingClient) -> None:
    clock = Clock()
    async with DevCluster(brokers=1, delay_scale=1.0, now_ms=clock) as cluster:
        a = cluster.brokers["broker-a"]
        await sent_back(client, a, 1)
        await a.stop()
        clock.ms += 1000
        assert a.messages("%RETRY%cg", 0) == []
        await a.start()
        assert len(a.messages("%RETRY%cg", 0)) == 1


@pytest.mark.parametrize("scale", [-1.0, float("nan"), float("inf")])
def test_a_bad_scale_is_refused(scale: float) -> None:
    with pytest.raises(ValueError, match="delay_scale"):
        Schedule(None, now_ms=Clock(), scale=scale)  # type: ignore[arg-type]


def test_the_devbroker_command_runs_rocketmqs_delay_table_by_default() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).delay_scale == 1.0
    assert parser.parse_args(["--delay-scale", "0.01"]).delay_scale == 0.01
