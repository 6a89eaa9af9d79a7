"""A replica that stops cleanly sends its marks, then leaves the publishers; the others take its share
over at once. "Sent" is not "applied": under load a replica's consumer (one for the inner and the marks
topics) has the stopping replica's last marks still to read, or in hand, when the broker tells it of the
leave. It must not publish what became its own before it has read the marks topic up to where it ended
then, or it publishes again what the stopped replica published a moment before (a duplicate the README
said a stop never makes). Two replicas in this process, on devbroker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.consume import InnerListener
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.replication import Replication
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.delay import DelayState
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.message import Message, MessageExt
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.app.dmq.conftest import (
    INNER_TOPIC,
    REAL_TOPIC,
    WAIT_S,
    Received,
    create_topics,
    dmq_settings,
    real_consumer,
)

NAMES = ("r0", "r1")
MARKS_TOPIC = "dmq_race_marks"
POLL_S = 0.02  # another component's state with no event to await (presence, the marks sent)


async def _until(condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(WAIT_S):
            while not condition():  # noqa: ASYNC110 - state of the replicas' own loops
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        raise AssertionError(f"not {what} within {WAIT_S} s") from None


def _rep(service: DmqService) -> Replication:
    assert service.replication is not None
    return service.replication


def _marks(service: DmqService, outcome: str) -> float:
    value = service.metrics.registry.get_sample_value("rocksidecar_dmq_marks_total", {"outcome": outcome})
    return value or 0.0


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=1, queues=2) as c:
        await create_topics(c, REAL_TOPIC, INNER_TOPIC, MARKS_TOPIC, MARKS_TOPIC + "_presence")
        yield c


@pytest.mark.parametrize("marks_read", [True, False], ids=["marks-read", "marks-never-read"])
async def test_a_replica_taking_over_a_stopped_one_applies_its_last_marks_before_publishing(
    cluster: DevCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    marks_read: bool,
) -> None:
    """``marks-never-read``: the marks stay unread (as when the marks queue's broker went down after the
    take-over noted where they end): the share waits a bounded time (the beats' timeout, 0.8 s here), then
    is taken over, a duplicate risked rather than the share stalled."""

    def replica(name: str) -> DmqService:
        options = DmqOptions(
            inner_topic=INNER_TOPIC, group="dmq_race_group", http_addr="127.0.0.1:0",
            replicas=",".join(NAMES), instance_name=name, copies=2, marks_topic=MARKS_TOPIC,
            presence_interval_s=0.2,
        )  # fmt: skip
        return DmqService(dmq_settings(cluster.namesrv_addr, tmp_path / name), options)

    a, b = replica("r0"), replica("r1")
    received = Received()
    reader = await real_consumer(cluster, received, "dmq_race_reader")
    client = RemotingClient()
    producer = Producer(NameServerClient(client, cluster.namesrv_addr), BrokerApi(client), ProducerConfig())
    stopped: list[DmqService] = []
    release = asyncio.Event()
    try:
        await producer.start()
        await a.start()
        await b.start()
        both = frozenset(NAMES)
        await _until(lambda: _rep(a)._live == both and _rep(b)._live == both, "both replicas live")

        # b is busy: a mark batch it reads waits until released (a consumer behind under load)
        in_hand = asyncio.Event()
        b_rep = _rep(b)
        apply = b_rep._apply

        async def busy_apply(batch: Sequence[MessageExt], listener: InnerListener) -> None:
            in_hand.set()
            await release.wait()
            await apply(batch, listener)

        monkeypatch.setattr(b_rep, "_apply", busy_apply)

        id_ = next(i for i in iter(new_uniq_id, None) if b_rep.replicas.publisher(i, both) == "r0")
        now = time.time_ns() // 1_000_000
        msg = inner.inner_message(Message(REAL_TOPIC, b"x", id=id_), now, inner_topic=INNER_TOPIC)
        await producer.send(msg, sharding_key=id_)
        await received.until(lambda got: id_ in [m.uniq_key for m in got])  # a published it
        await _until(lambda: b.delay.get(id_) is not None, "b's copy stored")
        await asyncio.wait_for(in_hand.wait(), WAIT_S)  # a's mark: read by b, not applied yet

        await a.stop()  # clean: its marks sent, then it leaves the publishers
        stopped.append(a)
        await _until(lambda: b_rep._live == frozenset({"r1"}), "b seeing a gone")
        await asyncio.wait_for(b.scheduler.wait_idle(), WAIT_S)  # b's take-over pass done
        if not marks_read:
            await _until(lambda: (s := b.delay.get(id_)) is not None and s.sent_to is not None, "taken over")
            assert "were not read up to their end" in caplog.text
            return
        state = b.delay.get(id_)
        assert state is not None and state.sent_to is None, (
            f"b published {id_} (now {state}) before applying a's mark of it: a duplicate"
        )

        release.set()
        await _until(lambda: _marks(b, "dropped") + _marks(b, "duplicate") >= 1, "a's mark applied")
        assert _marks(b, "duplicate") == 0
        state = b.delay.get(id_)
        assert state is not None and state.state is DelayState.SENT and state.sent_to is None
    finally:
        release.set()
        for s in (a, b):
            if s not in stopped:
                await s.stop()
        await reader.close()
        await producer.close()
        await client.close()
