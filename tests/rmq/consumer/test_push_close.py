"""close() racing the rest of the consumer: a rebalance half-way through an orderly queue's removal, the
broadcasting offsets file's timed write, and start() itself. Each time close() leaves nothing running,
persists every owned queue's progress and never runs two writers of the offsets file at once."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer import offset_store as offset_store_module
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, MessageModel
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import WAIT_S, BlockingListener, orderly_config, send_to_queues, wired

TOPIC = "CloseT"


class ConsumerListWatch(RemotingClient):
    """Sets ``answered`` when a GET_CONSUMER_LIST_BY_GROUP answer has come back while ``armed``."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.answered = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        resp = await super().invoke(addr, cmd, timeout_s)
        if cmd.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP and self.armed:
            self.answered.set()
        return resp


async def test_close_during_a_rebalances_orderly_removal_still_persists_that_queues_progress() -> None:
    """close() promises to persist every queue's offset before unregistering, so the next owner goes on
    where this member stopped. close() may come while the rebalance timer is removing an orderly queue
    whose listener is busy (the removal waits up to ORDERLY_UNLOCK_WAIT_S) and cancel that rebalance
    half-way: the queue is still listed (dropped) until its removal is over, so close() persists it, waits
    for its call and unlocks it with the others (it used to be out of ``queues`` already: nothing
    persisted it, and what it consumed since the last persist was consumed again)."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        broker = cluster.brokers["broker-a"]
        await send_to_queues(cluster, TOPIC, 3, queues=1)
        mq = MessageQueue(TOPIC, "broker-a", 0)
        listener = BlockingListener(block_at=2)
        client = ConsumerListWatch()
        consumer = PushConsumer(
            orderly_config("GC-close", close_timeout_s=0.2), cluster.namesrv_addr, listener, client=client
        )
        wired(consumer, client)  # type: ignore[arg-type]
        consumer.subscribe(TOPIC)
        try:
            await consumer.start()
            async with asyncio.timeout(WAIT_S):
                await listener.blocked.wait()  # 0 and 1 consumed, 2 running
            assert await consumer.offsets.read(mq, ReadType.MEMORY) == 2
            client.armed = True
            consumer.unsubscribe(TOPIC)  # the rebalance timer's round removes the queue
            async with asyncio.timeout(WAIT_S):
                # a round that has its member list after the unsubscribe goes straight on into
                # _remove_queue (an earlier round still in flight may answer first: wait for the next)
                while mq in consumer.queues and not consumer.queues[mq].pq.dropped:
                    client.answered.clear()
                    await client.answered.wait()
            assert consumer.stats["queues_removed"] == 0  # the removal is waiting for the busy listener
            await consumer.close()
            assert broker.locks.owner("GC-close", mq) is None
            assert broker.offsets.query("GC-close", TOPIC, 0) == 2, (
                f"close() left the broker at {broker.offsets.query('GC-close', TOPIC, 0)} for a queue "
                f"consumed up to 2"
            )
        finally:
            listener.release.set()
            await consumer.close()
            await client.close()


async def test_close_during_a_broadcasting_persist_never_runs_two_file_writers_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """LocalFileOffsetStore serialises its writers with a lock ("two writers would race on the temp
    file"), and the write runs in a thread that cancelling the awaiting task does not stop. close()
    cancels the persist timer while its write is in the thread: the lock stays held until that write is
    over, so close()'s own persist never writes the same offsets.json.tmp beside it (it did: one
    truncated what the other wrote, the loser's os.replace found no temp file and close() raised)."""
    mu = threading.Lock()
    count = {"calls": 0, "running": 0, "most": 0}
    first_in, second_done = threading.Event(), threading.Event()
    real_write = offset_store_module.write_atomically

    def write(path: Path, data: bytes) -> None:
        with mu:
            count["calls"] += 1
            n = count["calls"]
            count["running"] += 1
            count["most"] = max(count["most"], count["running"])
        try:
            if n == 1:
                first_in.set()
                # a slow disk: this write goes on once a second one has finished (or after 2 s, when no
                # second one can start meanwhile); in this order neither finds the other's temp file gone
                second_done.wait(timeout=2.0)
                real_write(path, data)
            else:
                real_write(path, data)
                second_done.set()
        finally:
            with mu:
                count["running"] -= 1

    monkeypatch.setattr(offset_store_module, "write_atomically", write)
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 1, queues=1)
        cfg = ConsumerConfig(
            "GC-bcast",
            instance_name="one",
            client_ip="127.0.0.1",
            consume_from=ConsumeFrom.FIRST_OFFSET,
            message_model=MessageModel.BROADCASTING,
            offsets_dir=tmp_path,
            persist_interval_s=0.01,
        )
        consumer = PushConsumer(cfg, cluster.namesrv_addr, BlockingListener(block_at=-1))
        consumer.subscribe(TOPIC)
        try:
            await consumer.start()
            assert await asyncio.to_thread(first_in.wait, WAIT_S)  # the timer's write is in its thread
            await consumer.close()  # cancels the timer, then persists
        finally:
            second_done.set()
            await consumer.close()
        assert count["most"] == 1, f"{count['most']} writes of the offsets file ran at once"


class HeldRequest(RemotingClient):
    """The first request of ``code`` waits for ``gate``; ``entered`` says it is waiting."""

    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code
        self.held = False
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == self.code and not self.held:
            self.held = True
            self.entered.set()
            await self.gate.wait()
        return await super().invoke(addr, cmd, timeout_s)


@pytest.mark.parametrize(
    "held",
    [
        pytest.param(RequestCode.GET_ROUTEINFO_BY_TOPIC, id="close-before-started-is-set"),
        pytest.param(RequestCode.HEART_BEAT, id="close-after-started-is-set"),
    ],
)
async def test_close_during_start_leaves_nothing_running(held: int) -> None:
    """close() while start() is still on its way (a slow name server or broker; the app shut down during
    its start-up): start() stops after its current step and nothing runs once close() has returned.
    Before start() registers, close() returns at once (there is nothing to undo); after, it waits for
    start() to stop and then undoes the registration. It used to do nothing in the first case (the
    consumer ran on, unclosable), and in the second start() created its loops after close(): the ones
    without a wake event waited on ``_closing``, found it set and ran again at once, for ever (the offsets
    timer and the log flusher, whose function never suspends, froze the whole event loop). Here both
    functions yield, so the test can look."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 1, queues=1)
        client = HeldRequest(held)
        consumer = PushConsumer(
            ConsumerConfig(
                "GC-startclose",
                instance_name="one",
                client_ip="127.0.0.1",
                consume_from=ConsumeFrom.FIRST_OFFSET,
            ),
            cluster.namesrv_addr,
            BlockingListener(block_at=-1),
            client=client,
        )
        wired(consumer, client)  # type: ignore[arg-type]
        consumer.subscribe(TOPIC)
        rounds = {"flush": 0, "persist": 0}

        async def flush_log() -> None:  # the real one never suspends: with _closing set it froze the loop
            rounds["flush"] += 1
            await asyncio.sleep(0)

        async def persist_offsets() -> None:  # with no queue owned, the real one does not suspend either
            rounds["persist"] += 1
            await asyncio.sleep(0)

        consumer._flush_log = flush_log  # type: ignore[method-assign]
        consumer.persist_offsets = persist_offsets  # type: ignore[method-assign]
        starting = asyncio.create_task(consumer.start())
        try:
            async with asyncio.timeout(WAIT_S):
                await client.entered.wait()  # start() is waiting for that request
                closing = asyncio.create_task(consumer.close())
                if held == RequestCode.HEART_BEAT:
                    await consumer.wait_closing(WAIT_S)  # close() has begun (and waits on the instance)
                else:
                    await closing
                client.gate.set()
                await closing
                await starting
            running = [t for t in consumer._loops if not t.done()]
            assert not running and not consumer.queues, (
                f"after close() returned, {len(running)} loop(s) of the consumer still run and it owns "
                f"{len(consumer.queues)} queue(s); rounds since: {rounds}"
            )
        finally:
            client.gate.set()
            for task in consumer._loops:
                task.cancel()
            await asyncio.gather(*consumer._loops, return_exceptions=True)
            if not starting.done():
                starting.cancel()
            consumer._closing.clear()  # let close() run its course now, so nothing outlives the test
            await consumer.close()
            await consumer.instance.close()
            await client.close()


async def test_a_timer_made_once_close_has_begun_stops_without_a_round() -> None:
    """The timers without a wake event wait on ``_closing``: one that finds it set stops, rather than
    running its round again at once, for ever (a round that never suspends froze the event loop)."""
    consumer = PushConsumer(
        ConsumerConfig("GC-loop", instance_name="one", client_ip="127.0.0.1"),
        "127.0.0.1:1",
        BlockingListener(-1),
    )
    ran = asyncio.Event()

    async def round_() -> None:
        ran.set()
        await asyncio.sleep(0)  # the spinning timer used to freeze the event loop: let the test see it

    consumer._closing.set()
    loop = consumer._loop(round_, 30.0)
    first_round = asyncio.create_task(ran.wait())
    try:
        async with asyncio.timeout(WAIT_S):
            await asyncio.wait([loop, first_round], return_when=asyncio.FIRST_COMPLETED)
        assert loop.done() and not ran.is_set(), "the timer ran a round after close() had begun"
    finally:
        for task in (loop, first_round):
            task.cancel()
        await asyncio.gather(loop, first_round, return_exceptions=True)
        await consumer.instance.close()
