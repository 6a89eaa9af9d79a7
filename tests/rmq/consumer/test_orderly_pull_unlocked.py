"""An orderly (clustering) member does not pull a queue whose broker lock it has lost, as Java 4.9.4's
DefaultMQPushConsumerImpl.pullMessage: without processQueue.isLocked() the pull request is put off by
pullTimeDelayMillsWhenException (our pull_delay_on_error_s, 3 s). Pulling anyway filled the cache with
messages the member now holding the lock consumes in order, and wasted pulls. Here the wait also ends
at once when the lock renewal gets the lock back, or when the queue is dropped or the consumer closed."""

from __future__ import annotations

import asyncio

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.errors import ConnectionClosed
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import WAIT_S, Recorder, orderly_config, send_to_queues, wired

TOPIC = "OrderUnlockedT"
MQ = MessageQueue(TOPIC, "broker-a", 0)
THIEF = "10.9.9.9@thief"


class PullCounter(RemotingClient):
    """Counts the PULL_MESSAGE requests sent for TOPIC (not the group's retry topic); ``sent`` is set on
    each."""

    def __init__(self) -> None:
        super().__init__()
        self.pulls = 0
        self.sent = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == RequestCode.PULL_MESSAGE and cmd.ext_fields.get("topic") == TOPIC:
            self.pulls += 1
            self.sent.set()
        return await super().invoke(addr, cmd, timeout_s)

    async def next_pull(self) -> None:
        self.sent.clear()
        async with asyncio.timeout(WAIT_S):
            await self.sent.wait()


async def _lose_the_lock(cluster: DevCluster, consumer: PushConsumer, client: PullCounter) -> None:
    """Started on one message: once it is consumed and the next pull is held by the broker, another
    client takes the queue's lock and the renewal finds it gone."""
    rec = consumer.listener
    assert isinstance(rec, Recorder)
    consumer.subscribe(TOPIC)
    await consumer.start()
    await rec.until(lambda got: len(got) >= 1)
    if client.pulls < 2:
        await client.next_pull()  # the pull after the first message, held by the broker
    locks = cluster.brokers["broker-a"].locks
    locks.unlock(consumer.config.group, consumer.client_id, [MQ])
    assert locks.try_lock(consumer.config.group, THIEF, [MQ]) == [MQ]
    await consumer.lock_all()
    assert not consumer.queues[MQ].pq.locked


async def test_a_queue_whose_lock_is_lost_is_not_pulled_until_the_renewal_gets_it_back() -> None:
    """The held pull returns with a new message; no further pull goes out while the lock is another's
    (pull_delay_on_error_s is long here: only the renewal can end the wait), and the renewal that gets
    the lock back starts the next pull at once; the message is consumed then."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 1, queues=1)
        client, rec = PullCounter(), Recorder()
        cfg = orderly_config("GOU-renew", pull_delay_on_error_s=600.0)
        consumer = PushConsumer(cfg, cluster.namesrv_addr, rec, client=client)
        wired(consumer, client)  # type: ignore[arg-type]
        try:
            await _lose_the_lock(cluster, consumer, client)
            pulls = client.pulls
            client.sent.clear()
            await send_to_queues(cluster, TOPIC, 1, queues=1)  # the held pull (sent while locked) returns it
            # whichever comes first: the loop waiting for the lock, or another pull
            waits = asyncio.ensure_future(consumer.stats.reach("pulls_unlocked_waits", 1))
            pulled = asyncio.ensure_future(client.sent.wait())
            await asyncio.wait([waits, pulled], timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED)
            pulled.cancel()
            assert client.pulls == pulls, "the orderly member pulled a queue whose broker lock it had lost"
            assert waits.done()
            assert len(rec.got) == 1  # and nothing consumed without the lock
            cluster.brokers["broker-a"].locks.unlock(cfg.group, THIEF, [MQ])
            next_pull = asyncio.ensure_future(client.next_pull())
            await consumer.lock_all()
            await next_pull  # at once: within WAIT_S, far below pull_delay_on_error_s
            await rec.until(lambda got: len(got) >= 2)
            assert [m.queue_offset for m in rec.got] == [0, 1]
        finally:
            await consumer.close()
            await client.close()


async def test_the_unlocked_wait_rechecks_after_the_delay_and_ends_at_once_on_a_drop() -> None:
    """Every pull_delay_on_error_s the member looks again at the lock, without pulling while it is still
    lost; a drop of the queue (an operator's reset) ends the wait at once, however long it is."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 1, queues=1)
        client, rec = PullCounter(), Recorder()
        cfg = orderly_config("GOU-recheck", pull_delay_on_error_s=0.01)
        consumer = PushConsumer(cfg, cluster.namesrv_addr, rec, client=client)
        wired(consumer, client)  # type: ignore[arg-type]
        try:
            await _lose_the_lock(cluster, consumer, client)
            await send_to_queues(cluster, TOPIC, 1, queues=1)  # the held pull returns
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("pulls_unlocked_waits", 3)
            pulls = client.pulls
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("pulls_unlocked_waits", 6)
            assert client.pulls == pulls, "the orderly member pulled a queue whose broker lock it had lost"
            consumer.config.pull_delay_on_error_s = 600.0  # only the drop can end the next wait now
            state = consumer.queues[MQ]
            assert state.pull_task is not None
            waits = consumer.stats["pulls_unlocked_waits"]
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("pulls_unlocked_waits", waits + 1)  # waiting 600 s
            consumer.reset_offsets(TOPIC, {MQ: 0})
            async with asyncio.timeout(WAIT_S):
                await asyncio.wait([state.pull_task])
            assert client.pulls == pulls
        finally:
            await consumer.close()
            await client.close()


class FailingLocks(PullCounter):
    """LOCK_BATCH_MQ fails (the connection drops) while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if self.failing and cmd.code == RequestCode.LOCK_BATCH_MQ:
            raise ConnectionClosed(f"{addr}: closed")
        return await super().invoke(addr, cmd, timeout_s)


async def test_a_renewal_whose_broker_fails_keeps_the_lock_state_and_the_pulls() -> None:
    """Java's lockAll catches the broker's exception and changes no process queue: a failed renewal says
    nothing of the lock. Marking the queue unlocked stopped its pulls (and consumption) for a whole
    renewal round after one network blip; the lock's own expiry still bounds how long it is trusted."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, TOPIC, 1, queues=1)
        client, rec = FailingLocks(), Recorder()
        cfg = orderly_config("GOU-blip", pull_delay_on_error_s=600.0)
        consumer = PushConsumer(cfg, cluster.namesrv_addr, rec, client=client)
        wired(consumer, client)  # type: ignore[arg-type]
        try:
            consumer.subscribe(TOPIC)
            await consumer.start()
            await rec.until(lambda got: len(got) >= 1)
            client.failing = True
            await consumer.lock_all()
            assert consumer.queues[MQ].pq.locked, "a failed lock renewal marked the queue unlocked"
            client.failing = False
            await send_to_queues(cluster, TOPIC, 1, queues=1)
            await rec.until(lambda got: len(got) >= 2)  # pulled and consumed without waiting 600 s
            assert consumer.stats["pulls_unlocked_waits"] == 0
        finally:
            await consumer.close()
            await client.close()
