"""Review of the push consumer's pull side: pull answers whose records a hostile or buggy broker
reorders, repeats or multiplies, against the commit window, the listener and flow control.

Every other request goes to devbroker; the first pull of broker-a's queue 0 of TOPIC is rewritten.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import message_codec
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import SYSFLAG_COMPRESSED, RequestCode, ResponseCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.consumer.queue_state import QueueState
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.message import MessageExt
from rocksidecar.rmq.message_codec import MAX_BODY_BYTES, pull_messages, pull_records
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import Recorder, send_to_queues, wired
from tests.rmq.consumer.test_pull_bad_records import MQ, Broker
from tests.rmq.protocol.test_inflate import record

TOPIC = "ReviewPullT"
BOUND_S = 5.0  # what "eventually" is allowed here; a sound consumer needs a fraction of a second


def split_records(body: bytes) -> list[bytes]:
    """A pull body's stored records: each begins with its total size (4 bytes, big-endian)."""
    out, pos = [], 0
    while pos < len(body):
        total = int.from_bytes(body[pos : pos + 4], "big")
        out.append(body[pos : pos + total])
        pos += total
    return out


class RewritingFirstPull(RemotingClient):
    """devbroker's answers, except the first pull of broker-a's queue 0 of TOPIC that finds records:
    its request goes with ``ask`` (a new maxMsgNums, or None) and its records are rewritten by
    ``rewrite``. Every later answer is devbroker's own."""

    def __init__(
        self,
        rewrite: Callable[[list[bytes]], list[bytes]],
        ask: int | None = None,
        *,
        refuse_back: bool = False,
    ) -> None:
        super().__init__()
        self.rewrite, self.ask, self.refuse_back = rewrite, ask, refuse_back
        self.rewritten = False
        self.sent_back = 0

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == RequestCode.CONSUMER_SEND_MSG_BACK:
            self.sent_back += 1
            if self.refuse_back:  # the broker is briefly unable to take send-backs
                return cmd.response(ResponseCode.SYSTEM_ERROR, "injected: send-back refused")
        ours = (
            cmd.code == RequestCode.PULL_MESSAGE
            and cmd.ext_fields.get("bname") == "broker-a"
            and cmd.ext_fields.get("queueId") == "0"
            and cmd.ext_fields.get("topic") == TOPIC
            and not self.rewritten
        )
        if ours and self.ask is not None:
            cmd.ext_fields["maxMsgNums"] = str(self.ask)
        resp = await super().invoke(addr, cmd, timeout_s)
        if ours and resp.body:
            self.rewritten = True
            resp.body = b"".join(self.rewrite(split_records(resp.body)))
        return resp


def from_a(got: list[MessageExt]) -> list[int]:
    return [m.queue_offset for m in got if m.body.startswith(b"broker-a/0/")]


async def started(
    cluster: DevCluster,
    consumers: list[PushConsumer],
    client: RewritingFirstPull,
    rec: Recorder,
    before_start: Callable[[PushConsumer], None] = lambda c: None,
    **kw: object,
) -> PushConsumer:
    cfg = ConsumerConfig(
        "GRP-" + str(len(consumers)), instance_name="one", client_ip="127.0.0.1",
        consume_from=ConsumeFrom.FIRST_OFFSET, rebalance_interval_s=3600, close_timeout_s=0.2,
        pull_delay_on_error_s=0.05, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, rec, client=client), client)  # type: ignore[arg-type]
    consumer.subscribe(TOPIC)
    consumers.append(consumer)
    before_start(consumer)
    await consumer.start()
    return consumer


async def test_a_pull_whose_records_come_in_descending_order_does_not_wedge_the_commit_window(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # The pull at 0 answers offsets 0..7 (all within [0, nextBeginOffset 8)) in the order 7, 6, ..., 0.
    # With a window of 4 (limit 0 + 4), QueueWindow._release stops at the first held message at or past
    # the limit (7): 0..3, below the limit, wait behind it, nothing is consumed, the committed offset
    # stays at 0, no persist opens the window: the queue never delivers another message.
    await send_to_queues(cluster, TOPIC, 8, queues=1)
    rec = Recorder()
    client = RewritingFirstPull(lambda records: records[::-1])
    await started(cluster, consumers, client, rec, commit_window=4)
    async with asyncio.timeout(BOUND_S):
        await rec.until(lambda got: sorted(set(from_a(got))) == list(range(8)))
    assert client.rewritten


async def test_an_offset_a_pull_answers_twice_reaches_the_listener_once(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # The pull at 0 answers the record at offset 0 twice (both within [0, nextBeginOffset)).
    # ProcessQueue.put caches it once, but _hand_out submits the pull's whole list: the listener gets
    # offset 0 twice. One worker, so the copy is consumed (FIFO) before offset 1.
    await send_to_queues(cluster, TOPIC, 4, queues=1)
    rec = Recorder()
    client = RewritingFirstPull(lambda records: [records[0], *records])
    await started(cluster, consumers, client, rec, consume_concurrency=1)
    await rec.until(lambda got: sorted(set(from_a(got))) == list(range(4)))
    assert client.rewritten
    assert Counter(from_a(rec.got))[0] == 1, from_a(rec.got)


async def test_a_pull_answer_larger_than_the_batch_asked_is_not_all_cached(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # pull_batch_size 2, but the broker answers the first pull with 32 records (a sound broker never
    # sends more than maxMsgNums). Every one is decoded (a compressed body inflated up to
    # max_body_bytes, 16 MiB), cached and handed out: one 16 MiB answer of small bombs makes the
    # consumer hold thousands of inflated bodies, whatever pull_batch_size and the flow-control
    # thresholds (checked only before a pull) say.
    await send_to_queues(cluster, TOPIC, 40, queues=1)
    rec = Recorder()
    client = RewritingFirstPull(lambda records: records, ask=32)
    handed: list[int] = []

    def spy_on(consumer: PushConsumer) -> None:
        real = consumer._hand_out

        def spy(state: QueueState, messages: list[MessageExt], next_offset: int) -> None:
            if state.mq.broker_name == "broker-a" and state.mq.topic == TOPIC and state.mq.queue_id == 0:
                handed.append(len(messages))
            real(state, messages, next_offset)

        consumer._hand_out = spy  # type: ignore[method-assign]

    consumer = await started(cluster, consumers, client, rec, spy_on, pull_batch_size=2)
    await rec.until(lambda got: sorted(set(from_a(got))) == list(range(40)))
    assert client.rewritten
    assert max(handed) <= consumer.config.pull_batch_size, handed


def undecodable(offset: int) -> bytes:
    return record(offset, b"\x00bad", SYSFLAG_COMPRESSED)  # a "compressed" body that does not inflate


async def test_undecodable_records_in_descending_order_skip_none_when_a_send_back_fails(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # The pull at 0 answers offsets 7, 6, ..., 0 with the records at 7 and 3 undecodable. _set_aside
    # walks result.undecodable in answer order: the send-back of 7 fails (the broker refuses send-backs
    # now), so it returns 7 and the pull loop hands out every message below 7 and pulls again from 7.
    # Offset 3 was neither sent to the DLQ nor delivered, yet the queue moved past it: the (honest)
    # message stored at 3 is never delivered and the committed offset passes it. In ascending order
    # (3, 7) the failed send-back of 3 makes the queue pull again from 3, and nothing is skipped.
    await send_to_queues(cluster, TOPIC, 8, queues=1)
    rec = Recorder()

    def rewrite(records: list[bytes]) -> list[bytes]:
        swapped = [undecodable(o) if o in (3, 7) else r for o, r in enumerate(records)]
        return swapped[::-1]

    client = RewritingFirstPull(rewrite, refuse_back=True)
    await started(cluster, consumers, client, rec)
    try:
        async with asyncio.timeout(BOUND_S):
            await rec.until(lambda got: sorted(set(from_a(got))) == list(range(8)))
    except TimeoutError:
        pass
    assert client.rewritten
    assert sorted(set(from_a(rec.got))) == list(range(8)), from_a(rec.got)


# The codec bound under BrokerApi.pull's refusal (added with the fix) -----------------------------------


def test_a_pull_answer_past_the_count_is_refused_before_the_rest_is_inflated(monkeypatch: Any) -> None:
    inflated: list[int] = []
    real = message_codec.decompress

    def counting(body: bytes, sys_flag: int, limit: int = MAX_BODY_BYTES) -> bytes:
        inflated.append(1)
        return real(body, sys_flag, limit)

    monkeypatch.setattr(message_codec, "decompress", counting)
    data = b"".join(record(o, zlib.compress(b"x" * 100), SYSFLAG_COMPRESSED) for o in range(10))
    for walk in (pull_messages, pull_records):
        inflated.clear()
        walked = walk(data, max_records=2)
        assert walked.refused == "more records than the 2 asked for"
        assert len(inflated) == 2  # the third record is not decoded, so the other eight are not inflated


@pytest.mark.parametrize(
    ("offsets", "most", "ok"),
    [
        ([3, 5, 9], 3, True),  # a broker-side tag or SQL filter skips offsets: still ascending
        ([3], 1, True),  # fewer than asked, or exactly as many
        ([4, 4], 2, False),  # an offset repeated
        ([5, 3], 2, False),  # descending
        ([1, 2, 3], 2, False),  # more than asked
    ],
)
def test_a_pull_answer_holds_at_most_the_records_asked_in_strictly_ascending_order(
    offsets: list[int], most: int, ok: bool
) -> None:
    data = b"".join(record(o, b"body") for o in offsets)
    for walk in (pull_messages, pull_records):
        walked = walk(data, max_records=most)
        assert (walked.refused is None) == ok, walked.refused
        assert not ok or len(walked.items) == len(offsets)
    # undecodable records count and are ordered with the rest
    bad_first = undecodable(offsets[0]) + b"".join(record(o, b"body") for o in offsets[1:])
    assert (pull_messages(bad_first, max_records=most).refused is None) == ok
    # without max_records (a body that is not a pull's answer) nothing is checked, as before
    unchecked = pull_messages(data)
    assert unchecked.refused is None and len(unchecked.items) == len(offsets)


async def test_the_refusal_is_a_frame_error_of_the_pull() -> None:
    broker = Broker([(5, record(5, b"a")), (6, record(5, b"b"))], max_offset=100)
    for as_records in (False, True):
        with pytest.raises(FrameError, match="at offset 5: record at offset 5 follows one at 5"):
            await BrokerApi(broker).pull("addr", "G", MQ, 5, as_records=as_records)
