"""Orderly consumption (ConsumeMessageOrderlyService): one listener call at a time per queue, in offset
order, and in clustering mode only while this client holds the broker's lock on the queue, so that two
members never interleave a queue's messages during a rebalance."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from ..message import MessageExt
from .config import ConsumeStatus, MessageModel
from .queue_state import ConsumeHost, QueueState, call_listener

log = logging.getLogger(__name__)


class OrderlyService:
    def __init__(self, host: ConsumeHost, clock: Callable[[], float] = time.monotonic) -> None:
        self._host = host
        self._clock = clock

    def start_queue(self, state: QueueState) -> None:
        self._host.spawn(state, self._run(state))

    def lock_valid(self, state: QueueState) -> bool:
        if self._host.config.message_model is MessageModel.BROADCASTING:
            return True
        pq = state.pq
        return pq.locked and self._clock() - pq.last_lock_at < self._host.config.lock_max_live_s

    async def _run(self, state: QueueState) -> None:
        host, cfg, pq = self._host, self._host.config, state.pq
        while not pq.dropped and not host.closing:
            state.ready.clear()
            if not self.lock_valid(state):
                await state.ready.wait()  # the lock renewal pokes the queue when it holds the lock
                continue
            batch = pq.take(cfg.consume_batch_size, below=state.window.limit if state.window.size else None)
            if not batch:
                await state.ready.wait()
                continue
            state.consuming += 1
            began = self._clock()
            try:
                status = await call_listener(host, state, batch, ConsumeStatus.SUSPEND)
            finally:
                state.consuming -= 1
            took = self._clock() - began
            if pq.dropped:
                host.count_consumed(state.mq, 0, 0, took)
                break  # the next owner consumes them again; our result must not move the offset
            ok = status is ConsumeStatus.SUCCESS
            host.count_consumed(state.mq, len(batch) if ok else 0, 0 if ok else len(batch), took)
            if ok:
                committed = pq.remove(m.queue_offset for m in batch)
                host.offsets.update(state.mq, committed, increase_only=True)
                host.advanced(state, committed)
                state.room.set()  # a pull paused by flow control may go on
                continue
            if await self._give_up(state, batch):
                continue
            pq.give_back([dataclasses.replace(m, reconsume_times=m.reconsume_times + 1) for m in batch])
            if await host.wait_closing(cfg.suspend_orderly_s):
                break
        state.poke()

    async def _give_up(self, state: QueueState, batch: list[MessageExt]) -> bool:
        """After max_reconsume_times, send the batch to the group's DLQ and move on (redelivering it
        through the retry topic would break the order); True when every message went. Broadcasting has
        no retry topic: there they are logged and skipped."""
        host, cfg = self._host, self._host.config
        if any(m.reconsume_times < cfg.max_reconsume_times for m in batch):
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
                cfg.max_reconsume_times + 1,
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
