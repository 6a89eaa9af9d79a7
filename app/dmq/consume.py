"""The inner topic's listener: store each delayed message synced in the delay store before the listener
returns, so the consumer's sliding window can only commit the inner offset after the sync.

A crash after the store and before the commit redelivers the inner message; its UNIQ_KEY is then
already known to the delay store (scheduled, sent or cancelled) and it is not scheduled again.

A cancel can reach the service before its message: a sidecar spools the message while no broker takes
it and sends the cancel directly later, spooled records replay out of order, or a rebalance hands the
queue over between the two. A cancel of an unknown id therefore leaves a tombstone in the delay store (a
CANCELLED marker, kept for its retention), and a message whose id is already cancelled is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from rocksidecar.delay import DelayedMessage, DelayState, DelayStore
from rocksidecar.rmq.consumer import ConsumeStatus
from rocksidecar.rmq.message import MessageExt, MessageQueue

from .inner import CancelRequest, InnerFormatError, parse

log = logging.getLogger(__name__)

Count = Callable[[str, int], None]  # (outcome, how many)


class InnerListener:
    """``await listener(batch, queue)`` as the PushConsumer's MessageListener."""

    def __init__(self, store: DelayStore, *, count: Count = lambda _o, _n: None) -> None:
        self._store = store
        self._count = count
        # ids being stored now: a cancel for one waits for its store (concurrent listener calls may
        # run the cancel's batch while the message's batch is still syncing).
        self._storing: dict[str, asyncio.Future[None]] = {}
        # ids whose cancel is being stored now: a message for one is dropped, as after its tombstone.
        self._cancelling: set[str] = set()

    async def __call__(self, batch: Sequence[MessageExt], _mq: MessageQueue) -> ConsumeStatus:
        now = self._store.now_ms()
        new: dict[str, DelayedMessage] = {}
        cancels: list[str] = []
        for ext in batch:
            try:
                item = parse(ext, now)
            except InnerFormatError as exc:
                # Redelivering cannot fix it: log, count and let the offset pass it.
                log.warning("inner message %s skipped: %s", ext.msg_id, exc)
                self._count("malformed", 1)
                continue
            if isinstance(item, CancelRequest):
                cancels.append(item.id)
            elif item.id in self._cancelling or self._cancelled(item.id):
                self._count("cancelled_before", 1)
            elif item.id in new or item.id in self._storing or self._store.get(item.id) is not None:
                self._count("duplicate", 1)
            else:
                new[item.id] = item
        if new:
            await self._schedule(list(new.values()))
        for id_ in cancels:
            await self._cancel(id_)
        return ConsumeStatus.SUCCESS

    async def _schedule(self, msgs: list[DelayedMessage]) -> None:
        done = asyncio.get_running_loop().create_future()
        for m in msgs:
            self._storing[m.id] = done
        try:
            await self._store.schedule_many(msgs)  # synced; raises StorageError: not stored
        finally:
            for m in msgs:
                self._storing.pop(m.id, None)
            done.set_result(None)
        self._count("scheduled", len(msgs))

    def _cancelled(self, id_: str) -> bool:
        status = self._store.get(id_)
        return status is not None and status.state is DelayState.CANCELLED

    async def _cancel(self, id_: str) -> None:
        self._cancelling.add(id_)  # before any await: a message batch running meanwhile must see it
        try:
            storing = self._storing.get(id_)
            if storing is not None:
                await storing
            outcome = await self._store.cancel(id_, remember_unknown=True)
        finally:
            self._cancelling.discard(id_)
        self._count(f"cancel_{outcome.value.lower()}", 1)
