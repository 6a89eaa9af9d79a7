"""Orderly consumption (ConsumeMessageOrderlyService): one listener call at a time per queue, in offset
order, and in clustering mode only while this client holds the broker's lock on the queue, so that two
members never interleave a queue's messages during a rebalance."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import time
from collections.abc import AsyncIterator, Callable

from ..message import MessageExt, MessageQueue
from .config import ConsumeStatus, MessageModel
from .queue_state import ConsumeHost, QueueState, call_listener

log = logging.getLogger(__name__)


class QueueLocks:
    """Java's MessageQueueLock: one lock per message queue, held across each listener call. Per queue and
    not per process queue: a queue dropped and added again (an operator's reset, an illegal offset) has
    a new process queue whose loop starts while the old one's call may still run. An entry lives only
    while a task holds or waits for it, so queues no longer owned leave nothing behind."""

    def __init__(self) -> None:
        self._locks: dict[MessageQueue, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, mq: MessageQueue, timeout_s: float | None = None) -> AsyncIterator[None]:
        """Hold ``mq``'s lock; TimeoutError when it is not free within ``timeout_s``."""
        lock, users = self._locks.get(mq, (asyncio.Lock(), 0))
        self._locks[mq] = (lock, users + 1)
        try:
            async with asyncio.timeout(timeout_s):
                await lock.acquire()
            try:
                yield
            finally:
                lock.release()
        finally:
            lock, users = self._locks[mq]
            if users == 1:
                del self._locks[mq]
            else:
                self._locks[mq] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class _Turn(enum.Enum):
    CONSUMED = "consumed"  # go on with the next batch
    IDLE = "idle"  # nothing to do until the queue is poked
    SUSPENDED = "suspended"  # the batch goes again after suspend_orderly_s
    STOPPED = "stopped"  # dropped during the call


class OrderlyService:
    def __init__(self, host: ConsumeHost, clock: Callable[[], float] = time.monotonic) -> None:
        self._host = host
        self._clock = clock
        self.queue_locks = QueueLocks()

    def start_queue(self, state: QueueState) -> None:
        self._host.spawn(state, self._run(state))

    def lock_valid(self, state: QueueState) -> bool:
        if self._host.config.message_model is MessageModel.BROADCASTING:
            return True
        pq = state.pq
        return pq.locked and self._clock() - pq.last_lock_at < self._host.config.lock_max_live_s

    async def wait_idle(self, mq: MessageQueue, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` (None: as long as it takes) until no listener call runs on ``mq``
        (Java's removeUnnecessaryMessageQueue tries the consume lock for 1 s); True when none does.
        Callers drop the queue's process queue first, so no call starts after this one returns True."""
        try:
            async with self.queue_locks.hold(mq, timeout_s):
                return True
        except TimeoutError:
            return False

    async def _run(self, state: QueueState) -> None:
        host, pq = self._host, state.pq
        while not pq.dropped and not host.closing:
            state.ready.clear()
            async with self.queue_locks.hold(state.mq):
                # The wait for the lock may have been a call of this queue's previous process queue: the
                # queue may have been dropped (or the consumer closed) meanwhile.
                if pq.dropped or host.closing:
                    break
                # Without the broker's lock, the lock renewal pokes the queue when it holds it again.
                turn = await self._turn(state) if self.lock_valid(state) else _Turn.IDLE
            if turn is _Turn.IDLE:
                await state.ready.wait()
            elif turn is _Turn.STOPPED or (turn is _Turn.SUSPENDED and await self._suspend(state)):
                break
        state.poke()

    async def _turn(self, state: QueueState) -> _Turn:
        """One batch to the listener and its result applied, under the queue's lock."""
        host, cfg, pq = self._host, self._host.config, state.pq
        batch = pq.take(cfg.consume_batch_size, below=state.window.limit if state.window.size else None)
        if not batch:
            return _Turn.IDLE
        state.consuming += 1
        began = self._clock()
        try:
            status = await call_listener(host, state, batch, ConsumeStatus.SUSPEND)
        finally:
            state.consuming -= 1
        took = self._clock() - began
        if pq.dropped:
            host.count_consumed(state.mq, 0, 0, took)
            return _Turn.STOPPED  # the next owner consumes them again; our result must not move the offset
        ok = status is ConsumeStatus.SUCCESS
        host.count_consumed(state.mq, len(batch) if ok else 0, 0 if ok else len(batch), took)
        if ok:
            committed = pq.remove(m.queue_offset for m in batch)
            host.offsets.update(state.mq, committed, increase_only=True)
            host.advanced(state, committed)
            state.room.set()  # a pull paused by flow control may go on
            return _Turn.CONSUMED
        if await self._give_up(state, batch):
            return _Turn.CONSUMED
        pq.give_back([dataclasses.replace(m, reconsume_times=m.reconsume_times + 1) for m in batch])
        return _Turn.SUSPENDED

    async def _suspend(self, state: QueueState) -> bool:
        """Wait suspend_orderly_s before the batch goes again, without the queue's lock; a drop or close()
        (both poke the queue) ends the wait at once, so that a removed queue's loop does not linger.
        True when the loop is to stop."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self._host.config.suspend_orderly_s
        while not state.pq.dropped and not self._host.closing:
            left = until - loop.time()
            if left <= 0:
                return False
            state.ready.clear()  # messages arriving meanwhile wake the wait too: the loop re-checks
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await state.ready.wait()
        return True

    async def _give_up(self, state: QueueState, batch: list[MessageExt]) -> bool:
        """After max_reconsume_times, send the batch to the group's DLQ and move on (redelivering it
        through the retry topic would break the order); True when every message went. Broadcasting has
        no retry topic: there they are logged and skipped. Unset, as Java's default, it never comes
        (reconsume_limit): the queue waits at the message for as long as it fails."""
        host, cfg = self._host, self._host.config
        if any(m.reconsume_times < cfg.reconsume_limit for m in batch):
            return False
        if cfg.message_model is not MessageModel.BROADCASTING:
            for msg in batch:
                if not await host.send_back(msg, state.mq, dead=True):
                    host.stats.bump("send_back_failed")
                    return False
        else:
            log.warning(
                "orderly broadcasting: skipping %d message(s) of %s after %d attempts",
                len(batch),
                state.mq,
                cfg.reconsume_limit + 1,
            )
        if state.pq.dropped:
            # Reset or rebalanced away while the send-back waited: the queue's offset is no longer ours
            # to move (committed here, it undid a reset back to an earlier offset).
            return True
        committed = state.pq.remove(m.queue_offset for m in batch)
        host.offsets.update(state.mq, committed, increase_only=True)
        host.advanced(state, committed)
        state.room.set()
        return True
