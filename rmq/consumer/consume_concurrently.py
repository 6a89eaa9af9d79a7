"""Concurrent consumption (ConsumeMessageConcurrentlyService): every pulled batch is split into
listener calls that run on a bounded pool; a failed message goes back to the broker's retry topic, and
if even that fails it is consumed again here later. The offset only moves over finished messages."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

from rmq.consumer.config import ConsumeStatus, MessageModel
from rmq.consumer.queue_state import ConsumeHost, QueueState, call_listener
from rmq.message import MessageExt

log = logging.getLogger(__name__)


class ConcurrentService:
    def __init__(self, host: ConsumeHost) -> None:
        self._host = host
        self._pool = asyncio.Semaphore(host.config.consume_concurrency)

    def submit(self, state: QueueState, messages: Sequence[MessageExt]) -> None:
        size = self._host.config.consume_batch_size
        for i in range(0, len(messages), size):
            self._host.spawn(state, self._consume(state, list(messages[i : i + size])))

    async def _consume(self, state: QueueState, batch: list[MessageExt]) -> None:
        host = self._host
        async with self._pool:
            if state.pq.dropped or host.closing:  # rebalanced away or closing while waiting for a
                return  # worker: they stay unacknowledged and are delivered again (here or elsewhere)
            state.consuming += 1
            try:
                status = await call_listener(host, state, batch, ConsumeStatus.RECONSUME_LATER)
            finally:
                state.consuming -= 1
        if state.pq.dropped:  # as Java: a dropped queue's results never move the offset
            return
        done = batch
        if status is not ConsumeStatus.SUCCESS:
            host.stats.bump("consume_failed", len(batch))
            kept = [m for m in batch if not await self._handle_failure(state, m)]
            if state.pq.dropped:  # dropped while sending back: the new owner redelivers the batch
                return
            kept_offsets = {m.queue_offset for m in kept}
            done = [m for m in batch if m.queue_offset not in kept_offsets]
            if kept:
                retry = [dataclasses.replace(m, reconsume_times=m.reconsume_times + 1) for m in kept]
                host.spawn(state, self._later(state, retry))
        else:
            host.stats.bump("consume_ok", len(batch))
        offset = state.pq.remove(m.queue_offset for m in done)
        host.offsets.update(state.mq, offset, increase_only=True)
        state.poke()

    async def _handle_failure(self, state: QueueState, msg: MessageExt) -> bool:
        """True when the message is taken care of (sent back, or given up in broadcasting)."""
        host = self._host
        if host.config.message_model is MessageModel.BROADCASTING:
            # No retry topic in broadcasting: retry here, up to the same limit, then log it (as Java).
            if msg.reconsume_times >= host.config.max_reconsume_times:
                log.warning(
                    "broadcasting: dropping %s after %d attempts", msg.msg_id, msg.reconsume_times + 1
                )
                return True
            return False
        if await host.send_back(msg, state.mq):
            return True
        host.stats.bump("send_back_failed")
        return False

    async def _later(self, state: QueueState, batch: list[MessageExt]) -> None:
        # Kept in the process queue meanwhile, so the committed offset cannot pass them.
        if await self._host.wait_closing(self._host.config.send_back_retry_s) or state.pq.dropped:
            return
        await self._consume(state, batch)
