"""The push consumer's offset commits against Java 4.9.4 (RemoteBrokerOffsetStore,
LocalFileOffsetStore, DefaultMQPushConsumerImpl.shutdown, RebalanceImpl.removeUnnecessaryMessageQueue):
a failed write of the broadcasting offsets file is logged, not raised (close() and a queue's removal go
on), and a removed queue's commit is sent one-way (a slow broker holds up no rebalance)."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer import offset_store as offset_store_module
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, MessageModel
from rocksidecar.rmq.consumer.offset_store import write_atomically
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.errors import RequestTimeout
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import WAIT_S, Recorder, send_to_queues, wired

TOPIC = "OffT"


async def test_close_finishes_when_the_broadcasting_offsets_file_cannot_be_written(tmp_path: Path) -> None:
    """Java's LocalFileOffsetStore.persistAll catches the IOException of its write and logs it, so
    shutdown() goes on to unregister the client and shut the instance down. Ours lets the OSError of
    write_atomically (a full or read-only volume: here the temp file's name is taken by a directory)
    out of close(): close() raises half-way, never unregisters, never stops its tasks or the instance,
    and a second close() returns at once (``_closing`` is set), so nothing can finish it."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        broker = cluster.brokers["broker-a"]
        await send_to_queues(cluster, TOPIC, 2, queues=1)
        cfg = ConsumerConfig(
            "GB-offsets",
            instance_name="one",
            client_ip="127.0.0.1",
            message_model=MessageModel.BROADCASTING,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            offsets_dir=tmp_path,
        )
        listener = Recorder()
        consumer = PushConsumer(cfg, cluster.namesrv_addr, listener)
        consumer.subscribe(TOPIC)
        path = tmp_path / consumer.client_id / "GB-offsets" / "offsets.json"
        path.with_name("offsets.json.tmp").mkdir(parents=True)  # every write of the file fails
        await consumer.start()
        try:
            await listener.until(lambda got: len(got) == 2)
            assert broker.clients.consumer_ids("GB-offsets") == [consumer.client_id]
            try:
                async with asyncio.timeout(WAIT_S):
                    await consumer.close()
            except OSError as exc:
                raise AssertionError(f"close() raised {exc!r} instead of logging the failed write") from exc
            assert broker.clients.consumer_ids("GB-offsets") == [], "close() never unregistered"
        finally:
            await consumer.instance.close()  # what close() left running (idempotent once closed)


async def test_broadcasting_queue_moved_while_the_offsets_file_fails_is_consumed_again_once_it_works(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An illegal offset (here: a file offset past the queue's end, as after a broker's store was wiped)
    drops the queue and, offset_illegal_wait_s later, removes it (persisting the corrected offset) for
    the rebalance to add it again. Java's LocalFileOffsetStore.persist is a no-op and persistAll logs an
    IOException, so the removal always completes and the queue comes back. Ours lets the OSError of the
    file write (a full volume for a moment) out of _remove_queue: the _readd_queue task dies with the
    queue left in ``queues``, dropped and not pulling; every later rebalance sees it as owned and never
    adds it again, so the queue is never consumed again, even after the volume has room (until a
    restart). A Rock-DMQ replica (broadcasting, offsets on its data volume) then stops replicating."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 2, queues=1)  # offsets 0 and 1
        mq = MessageQueue(TOPIC, "broker-a", 0)
        cfg = ConsumerConfig(
            "GB-moved",
            instance_name="one",
            client_ip="127.0.0.1",
            message_model=MessageModel.BROADCASTING,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            offsets_dir=tmp_path,
            offset_illegal_wait_s=0.05,
            persist_interval_s=3600.0,  # only the removal writes the file in this test
        )
        listener = Recorder()
        consumer = PushConsumer(cfg, cluster.namesrv_addr, listener)
        consumer.subscribe(TOPIC)
        path = tmp_path / consumer.client_id / "GB-moved" / "offsets.json"
        # the queue's offset far past its end (2): the first pull is answered OFFSET_MOVED
        key = orjson.dumps({"brokerName": "broker-a", "queueId": 0, "topic": TOPIC}).decode()
        write_atomically(path, orjson.dumps({"offsetTable": {key: 1000}}))

        full = True
        failed, written = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()

        def write(p: Path, data: bytes) -> None:  # runs in the executor's thread
            if full:
                loop.call_soon_threadsafe(failed.set)
                raise OSError(errno.ENOSPC, "No space left on device", str(p))
            write_atomically(p, data)
            loop.call_soon_threadsafe(written.set)

        monkeypatch.setattr(offset_store_module, "write_atomically", write)
        await consumer.start()
        try:
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("offsets_moved", 1)
                await failed.wait()  # the removal's write of the corrected offset failed
                # whatever the removal does with the failure has run its course
                while any(not t.done() for t in consumer._side_tasks):
                    await asyncio.wait(list(consumer._side_tasks))
            full = False  # the volume has room again
            consumer._rebalance_now.set()
            try:
                async with asyncio.timeout(WAIT_S):
                    await written.wait()  # a removal persisted the corrected offset at last; the
                    # rebalance it asks for has yet to read the file (a thread) and add the queue back:
                    added = consumer.stats["queues_added:" + TOPIC]
                    await consumer.stats.reach("queues_added:" + TOPIC, added + 1)
            except TimeoutError:
                state = consumer.queues.get(mq)
                where = "dropped, in queues" if state is not None and state.pq.dropped else repr(state)
                msg = f"the queue is {where}: its removal never finished, it is not added again"
                raise AssertionError(msg) from None
            assert consumer.queues[mq].pq.next_offset == 2
            await send_to_queues(cluster, TOPIC, 1, queues=1)  # offset 2
            await listener.until(lambda got: any(m.queue_offset == 2 for m in got))
        finally:
            await consumer.close()


async def test_a_reset_queue_whose_removal_fails_unexpectedly_is_not_left_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator's reset drops the queue and removes it for the rebalance to add it again. A failure
    of that removal other than a broker's or the file's (a bug: here the commit raises RuntimeError) left
    the queue in ``queues``, dropped and not pulling: every later rebalance saw it as owned, so it was
    never consumed again. Whatever fails, the removal takes it out and the rebalance adds it back."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 2, queues=1)  # offsets 0 and 1
        mq = MessageQueue(TOPIC, "broker-a", 0)
        cfg = ConsumerConfig(
            "GC-reset-fails",
            instance_name="one",
            client_ip="127.0.0.1",
            consume_from=ConsumeFrom.FIRST_OFFSET,
            offset_illegal_wait_s=0.05,
        )
        listener = Recorder()
        consumer = PushConsumer(cfg, cluster.namesrv_addr, listener)
        consumer.subscribe(TOPIC)
        real_persist = consumer.offsets.persist
        failures = 0

        async def persist(q: MessageQueue) -> None:
            nonlocal failures
            if q == mq and failures == 0:
                failures += 1
                raise RuntimeError("injected: a bug in the removal's commit")
            await real_persist(q)

        monkeypatch.setattr(consumer.offsets, "persist", persist)
        await consumer.start()
        try:
            await listener.until(lambda got: len(got) == 2)
            added = consumer.stats["queues_added:" + TOPIC]
            assert consumer.reset_offsets(TOPIC, {mq: 0}) == [mq]
            try:
                async with asyncio.timeout(WAIT_S):
                    await consumer.stats.reach("queues_added:" + TOPIC, added + 1)
            except TimeoutError:
                state = consumer.queues.get(mq)
                where = "dropped, in queues" if state is not None and state.pq.dropped else repr(state)
                raise AssertionError(f"the queue is {where}: it is not added again") from None
            assert failures == 1
            assert not consumer.queues[mq].pq.dropped
            await listener.until(lambda got: len(got) == 4)  # 0 and 1 again, from the reset
        finally:
            await consumer.close()


class SlowCommits(RemotingClient):
    """A broker (``slow_addr``) slow to answer UPDATE_CONSUMER_OFFSET (a GC pause, a congested link): an
    answered commit gets its answer once ``release`` is set, else times out after its timeout_s as the
    real client's would (counted in ``timed_out``). One-way commits and everything else go through."""

    def __init__(self, slow_addr: str) -> None:
        super().__init__()
        self.slow_addr = slow_addr
        self.release = asyncio.Event()
        self.timed_out = 0

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == RequestCode.UPDATE_CONSUMER_OFFSET and addr == self.slow_addr:
            try:
                async with asyncio.timeout(timeout_s):
                    await self.release.wait()
            except TimeoutError:
                self.timed_out += 1
                raise RequestTimeout(f"injected: no answer within {timeout_s}s", addr=addr) from None
        return await super().invoke(addr, cmd, timeout_s)


async def test_a_slow_brokers_commit_does_not_hold_up_adding_the_queues_of_others() -> None:
    """RebalanceImpl.removeUnnecessaryMessageQueue commits the removed queue's offset with
    updateConsumeOffsetToBroker(mq, offset) - oneway: the rebalance never waits for the broker's answer
    and goes on to the queues it gained. Ours awaits an answered UPDATE_CONSUMER_OFFSET per removed queue
    (up to the store's 3 s timeout), one after the other, under the rebalance lock: while one broker is
    slow to answer, no queue of any other broker or topic is added (here 2 queues: 6 s; 8 queues of a
    broker that stopped answering: 24 s with nothing new consumed, every round)."""
    async with DevCluster(brokers=2, queues=2) as cluster:
        await send_to_queues(cluster, "OffX", 1, queues=2)
        await send_to_queues(cluster, "OffY", 1, queues=2)
        client = SlowCommits(cluster.brokers["broker-a"].addr)
        cfg = ConsumerConfig(
            "GC-slow", instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET
        )
        consumer = PushConsumer(cfg, cluster.namesrv_addr, Recorder(), client=client)
        wired(consumer, client)  # type: ignore[arg-type]
        consumer.subscribe("OffX")
        try:
            await consumer.start()
            assert {mq.topic for mq in consumer.queues} == {"OffX", "%RETRY%GC-slow"}
            consumer.unsubscribe("OffX")
            consumer.subscribe("OffY")  # the next round removes OffX's queues and adds OffY's
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("queues_added:OffY", 4)
            assert "OffX" not in {mq.topic for mq in consumer.queues}
            assert client.timed_out == 0, (
                f"OffY's queues were added only after {client.timed_out} commits to the slow broker-a had "
                f"timed out, one after the other"
            )
        finally:
            client.release.set()
            await consumer.close()
            await client.close()
