"""Offsets a pull answer claims, and the offsets a tag filter passes over.

A pull's records lie in [offset asked, nextBeginOffset): a record claiming another offset (a broken or
hostile broker, or 5.x's static topics, which shift them) is refused with the pull, which is tried again
after the error delay. Taken as claimed, one a little beyond was committed past offsets never pulled,
one far beyond wedged the queue behind the commit window, and records whose nextBeginOffset did not
move were pulled in a hot loop and delivered again and again.

Offsets the broker's filter passed over reach no listener, so no consumption moves the commit window
over them: the pull loop does, or a matching message past a filtered run of a window's length waited
behind the window for good.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.message import MessageExt, MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import Recorder, send_to_queues, start, wired
from tests.rmq.consumer.test_pull_bad_records import MQ, Broker
from tests.rmq.protocol.test_inflate import record

TOPIC = "PullOffsetsT"
QUEUE_OFFSET_AT = 20  # a stored record: total, magic, crc, queueId, flag (5 ints), then queueOffset


class Claiming(Broker):
    """Answers as ``Broker`` does, then says ``next_begin`` (None: the honest one)."""

    def __init__(self, records: list[tuple[int, bytes]], next_begin: int | None = None) -> None:
        super().__init__(records, max_offset=100)
        self.next_begin = next_begin

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        resp = await super().invoke(addr, cmd, timeout_s)
        if self.next_begin is not None:
            resp.ext_fields["nextBeginOffset"] = str(self.next_begin)
        return resp


@pytest.mark.parametrize(
    ("records", "next_begin"),
    [
        pytest.param([(5, record(35, b"a")), (6, record(6, b"b"))], None, id="one-beyond-the-next-offset"),
        pytest.param([(5, record(5, b"a")), (6, record(10**12, b"b"))], None, id="one-far-beyond"),
        pytest.param([(5, record(4, b"a"))], None, id="one-below-the-offset-asked"),
        pytest.param([(5, record(5, b"a")), (6, record(6, b"b"))], 5, id="next-offset-does-not-move"),
    ],
)
@pytest.mark.parametrize("as_records", [False, True])
async def test_a_pull_whose_records_lie_outside_the_offsets_asked_is_refused(
    records: list[tuple[int, bytes]], next_begin: int | None, as_records: bool
) -> None:
    broker = Claiming(records, next_begin)
    with pytest.raises(FrameError, match="outside"):
        await BrokerApi(broker).pull("addr", "G", MQ, 5, as_records=as_records)


async def test_records_within_the_offsets_asked_are_taken_with_gaps_the_filter_left() -> None:
    broker = Claiming([(5, record(5, b"a")), (9, record(9, b"b"))], next_begin=12)
    result = await BrokerApi(broker).pull("addr", "G", MQ, 5)
    assert [m.queue_offset for m in result.messages] == [5, 9]
    assert result.next_begin_offset == 12


async def test_the_commit_window_opens_over_offsets_the_tag_filter_passed_over(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # On queue 0 of each broker: 10 messages tagged B, then 2 tagged A; the group takes A only, with
    # a window of 4. Before, the window stayed at offset 0 + 4 (nothing consumed moved it) and the A
    # messages at offsets 10 and 11 were held for good.
    await send_to_queues(cluster, TOPIC, 10, tags="B", queues=1)
    await send_to_queues(cluster, TOPIC, 2, tags="A", queues=1)
    rec = Recorder()
    cfg = ConsumerConfig(
        "GR-filtered", instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET,
        commit_window=4,
    )  # fmt: skip
    consumer = await start(consumers, cluster, cfg, rec, "A", topic=TOPIC)
    await rec.until(lambda got: len(got) == 4)
    assert sorted(m.queue_offset for m in rec.got) == [10, 10, 11, 11]
    assert all(m.tags == "A" for m in rec.got)
    assert consumer.stats["window_persists"] >= 2  # the window moved over the filtered run


class Rewriting(RemotingClient):
    """The first pull of broker-a's queue 0 answers with its first record claiming ``fake`` as its
    queueOffset; every other answer is devbroker's own."""

    def __init__(self, fake: int) -> None:
        super().__init__()
        self.fake = fake
        self.rewritten = False

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        resp = await super().invoke(addr, cmd, timeout_s)
        ours = (
            cmd.code == RequestCode.PULL_MESSAGE
            and cmd.ext_fields.get("bname") == "broker-a"
            and cmd.ext_fields.get("queueId") == "0"
            and cmd.ext_fields.get("topic") == TOPIC
        )
        if ours and not self.rewritten and resp.body:
            self.rewritten = True
            body = bytearray(resp.body)
            struct.pack_into(">q", body, QUEUE_OFFSET_AT, self.fake)
            resp.body = bytes(body)
        return resp


async def test_a_record_claiming_a_later_offset_is_not_committed_past_what_was_never_pulled(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # The pull at 0 answers nextBeginOffset 32 with its first record claiming 35 (a real offset, not
    # yet pulled). Before, the group committed 35 while the message at 0 was still in its listener and
    # 32..34 had never been pulled: a restart lost them.
    await send_to_queues(cluster, TOPIC, 40, queues=1)
    release = asyncio.Event()

    class HoldsTheFirst(Recorder):
        async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
            if any(m.body == b"broker-a/0/0" for m in msgs):
                await release.wait()
            return await super().__call__(msgs, mq)

    rec = HoldsTheFirst()
    client = Rewriting(fake=35)
    cfg = ConsumerConfig(
        "GR-claims", instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET,
        rebalance_interval_s=3600, close_timeout_s=0.2, pull_delay_on_error_s=0.05,
    )  # fmt: skip
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, rec, client=client), client)
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    await consumer.start()

    def from_a(got: list[MessageExt]) -> set[int]:
        return {m.queue_offset for m in got if m.body.startswith(b"broker-a/0/")}

    await rec.until(lambda got: from_a(got) == set(range(1, 40)))  # all but 0, which its listener holds
    assert client.rewritten and consumer.stats["pull_errors"] >= 1
    await consumer.persist_offsets()
    assert cluster.brokers["broker-a"].offsets.query("GR-claims", TOPIC, 0) == 0
    release.set()
    await rec.until(lambda got: 0 in from_a(got))
    assert sorted(m.queue_offset for m in rec.got if m.body.startswith(b"broker-a/0/")) == list(range(40))
