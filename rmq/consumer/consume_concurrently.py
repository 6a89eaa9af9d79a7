"""Concurrent consumption (ConsumeMessageConcurrentlyService): every pulled batch is split into
listener calls that a fixed pool of workers takes from one queue; a failed message goes back to the
broker's retry topic, and if even that fails it is consumed again here later. The offset only moves
over finished messages.

Like Java's consumeExecutor, the pool is ``consume_concurrency`` long-lived workers fed by a queue, not
a task per listener call; and like Java's cleanExpireMsg, the consume timeout is a periodic sweep over
the workers, not a timer around every call (both were a quarter of the consumer's time per message).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence

from ..message import MessageExt
from .config import ConsumeStatus, MessageModel
from .queue_state import ConsumeHost, QueueState

log = logging.getLogger(__name__)

SWEEP_MAX_S = 1.0  # how late past its consume timeout a stuck call is failed, at most

Item = tuple[QueueState, list[MessageExt]]


@dataclasses.dataclass(eq=False)
class _Worker:
    task: asyncio.Task[None] | None = None
    calls: int = 0  # listener calls begun; the sweep tells one call from the next by it
    busy: bool = False  # inside the listener now
    seen_call: int = -1  # the call the sweep first saw running ...
    seen_at: float = 0.0  # ... and when: no clock read per call, only per sweep
    expired: bool = False  # the sweep cancelled the running call


class ConcurrentService:
    def __init__(self, host: ConsumeHost, *, clock: Callable[[], float] | None = None) -> None:
        """``clock``: loop time by default (tests inject one and call ``sweep`` themselves)."""
        self._host = host
        self._clock = clock
        self._items: asyncio.Queue[Item] | None = None  # made on first use, inside the running loop
        self._workers: list[_Worker] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._outstanding = 0  # items queued or being consumed
        self._idle: asyncio.Event | None = None

    # the pool --------------------------------------------------------------------------------
    def submit(self, state: QueueState, messages: Sequence[MessageExt]) -> None:
        size = self._host.config.consume_batch_size
        if size == 1:
            for m in messages:
                self._put(state, [m])
        else:
            for i in range(0, len(messages), size):
                self._put(state, list(messages[i : i + size]))

    def _put(self, state: QueueState, batch: list[MessageExt]) -> None:
        items = self._items if self._items is not None else self._start()
        items.put_nowait((state, batch))
        self._outstanding += 1
        assert self._idle is not None
        self._idle.clear()

    def _start(self) -> asyncio.Queue[Item]:
        loop = asyncio.get_running_loop()
        self._items = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()
        for _ in range(self._host.config.consume_concurrency):
            worker = _Worker()
            worker.task = loop.create_task(self._work(worker))
            self._workers.append(worker)
        self._sweeper = loop.create_task(self._sweep_loop())
        return self._items

    async def _work(self, worker: _Worker) -> None:
        assert self._items is not None and self._idle is not None
        get = self._items.get
        while True:
            state, batch = await get()
            try:
                await self._consume(state, batch, worker)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours must not shrink the pool
                log.exception("consuming %d message(s) of %s failed", len(batch), state.mq)
            finally:
                self._outstanding -= 1
                if not self._outstanding:
                    self._idle.set()

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the listener calls running now; queued items of a closing
        consumer or a dropped queue end at once, unconsumed."""
        if self._idle is not None and not self._idle.is_set():
            try:
                async with asyncio.timeout(timeout_s):
                    await self._idle.wait()
            except TimeoutError:
                log.warning("%d listener call(s) still running after %.1f s", self._outstanding, timeout_s)

    async def stop(self) -> None:
        tasks = [w.task for w in self._workers if w.task is not None]
        if self._sweeper is not None:
            tasks.append(self._sweeper)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()
        self._items = self._sweeper = None

    # the consume timeout ---------------------------------------------------------------------
    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _sweep_loop(self) -> None:
        interval = min(SWEEP_MAX_S, self._host.config.consume_timeout_s / 2)
        while True:
            await asyncio.sleep(interval)
            self.sweep()

    def sweep(self) -> int:
        """Fail the listener calls running for consume_timeout_s since a sweep first saw them (their
        workers go on); how many. A call ends up failed between the timeout and the timeout plus one
        sweep interval after it began."""
        now, timeout, expired = self._now(), self._host.config.consume_timeout_s, 0
        for worker in self._workers:
            if not worker.busy or worker.expired or worker.task is None:
                continue
            if worker.seen_call != worker.calls:
                worker.seen_call, worker.seen_at = worker.calls, now
            elif now - worker.seen_at >= timeout:
                worker.expired = True
                worker.task.cancel()
                expired += 1
        return expired

    async def _call(
        self, state: QueueState, batch: list[MessageExt], worker: _Worker
    ) -> ConsumeStatus | list[ConsumeStatus]:
        """The app's listener on one batch: one status, or one per message; an exception, the sweep's
        timeout or an answer that is neither counts as RECONSUME_LATER (Java treats a throwing
        listener as a failure). CancelledError ends the worker only when the worker is being stopped or
        the consumer is closing (a listener withdrawing its call then: nothing sent back, nothing
        committed)."""
        host = self._host
        worker.calls += 1
        worker.busy = True
        try:
            status = await host.listener(batch, state.mq)
        except asyncio.CancelledError:
            task = worker.task
            assert task is not None
            if worker.expired:
                # The sweep's cancel was for the call, not for the worker; one more pending on top of it
                # (stop() while the listener cleaned up) is for the worker: it ends.
                if task.uncancel():
                    raise
                log.warning(
                    "listener ran past the consume timeout on %d message(s) of %s", len(batch), state.mq
                )
                return ConsumeStatus.RECONSUME_LATER
            if task.cancelling() or host.closing:
                raise
            # Not ours: the listener awaited something another party cancelled. As Java's catch Throwable,
            # a failure; re-raised it would end this worker for good and hold the message (and the
            # queue's committed offset) for ever.
            log.warning(
                "listener raised CancelledError on %d message(s) of %s: taken as a failure",
                len(batch),
                state.mq,
            )
            return ConsumeStatus.RECONSUME_LATER
        except Exception:
            log.exception("listener failed on %d message(s) of %s", len(batch), state.mq)
            return ConsumeStatus.RECONSUME_LATER
        finally:
            worker.busy = worker.expired = False
        if isinstance(status, ConsumeStatus):
            return status
        if isinstance(status, list | tuple) and len(status) == len(batch):
            return [s if isinstance(s, ConsumeStatus) else ConsumeStatus.RECONSUME_LATER for s in status]
        log.error("listener answered %r for %d message(s) of %s", status, len(batch), state.mq)
        return ConsumeStatus.RECONSUME_LATER

    # one listener call and its outcome -------------------------------------------------------
    async def _consume(self, state: QueueState, batch: list[MessageExt], worker: _Worker) -> None:
        host = self._host
        if state.pq.dropped or host.closing:  # rebalanced away or closing while queued: they stay
            return  # unacknowledged and are delivered again (here or elsewhere)
        state.consuming += 1
        began = self._now()
        try:
            status = await self._call(state, batch, worker)
        finally:
            state.consuming -= 1
        took = self._now() - began
        if state.pq.dropped:  # as Java: a dropped queue's results never move the offset
            host.count_consumed(state.mq, 0, 0, took)
            return
        failed: list[tuple[MessageExt, ConsumeStatus]] = []
        if status is not ConsumeStatus.SUCCESS:
            statuses = status if isinstance(status, list) else [status] * len(batch)
            failed = [(m, s) for m, s in zip(batch, statuses, strict=True) if s is not ConsumeStatus.SUCCESS]
        host.count_consumed(state.mq, len(batch) - len(failed), len(failed), took)
        done = batch
        if failed:
            kept = [m for m, s in failed if not await self._handle_failure(state, m, s)]
            if state.pq.dropped:  # dropped while sending back: the new owner redelivers the batch
                return
            kept_offsets = {m.queue_offset for m in kept}
            done = [m for m in batch if m.queue_offset not in kept_offsets]
            if kept:
                # Java bumps the count on the message itself; ours are frozen: a copy, which the process
                # queue is told of so that it still knows it for the one it holds (ProcessQueue.held).
                retry = [dataclasses.replace(m, reconsume_times=m.reconsume_times + 1) for m in kept]
                state.pq.consumed_again(retry)
                host.spawn(state, self._later(state, retry))
        offset = state.pq.remove(m.queue_offset for m in done)
        host.offsets.update(state.mq, offset, increase_only=True)
        host.advanced(state, offset)
        state.poke()

    async def _handle_failure(self, state: QueueState, msg: MessageExt, status: ConsumeStatus) -> bool:
        """True when the message is taken care of (sent back, or given up in broadcasting)."""
        host = self._host
        dead = status is ConsumeStatus.DEAD_LETTER
        if host.config.retry_locally_forever and not dead:
            return False  # consumed again here (_later), however often it failed
        if host.config.message_model is MessageModel.BROADCASTING:
            # No retry topic in broadcasting: retry here, up to the same limit, then log it (as Java).
            if dead or msg.reconsume_times >= host.config.reconsume_limit:
                log.warning(
                    "broadcasting: dropping %s after %d attempts", msg.msg_id, msg.reconsume_times + 1
                )
                return True
            return False
        if await host.send_back(msg, state.mq, dead=dead):
            if dead:
                host.stats.bump("dead_lettered")
            return True
        host.stats.bump("send_back_failed")
        return False

    async def _later(self, state: QueueState, batch: list[MessageExt]) -> None:
        # Kept in the process queue meanwhile, so the committed offset cannot pass them.
        if await self._host.wait_closing(self._host.config.send_back_retry_s) or state.pq.dropped:
            return
        self._put(state, batch)
