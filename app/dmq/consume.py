"""The inner topic's listener: store each delayed message synced in the delay store before the listener
returns, so the consumer's sliding window can only commit the inner offset after the sync.

A crash after the store and before the commit redelivers the inner message; its UNIQ_KEY is then
already known to the delay store (scheduled, sent or cancelled) and it is not scheduled again.

A cancel can reach the service before its message: a sidecar spools the message while no broker takes
it and sends the cancel directly later, spooled records replay out of order, or a rebalance hands the
queue over between the two. A cancel of an unknown id therefore leaves a tombstone in the delay store (a
CANCELLED marker, kept for its retention), and a message whose id is already cancelled is dropped.

Any producer may write the inner topic: a message that cannot be scheduled (app.dmq.inner.Reject) is
skipped, counted and logged (throttled per reason), and never fails the batch it came in: a failed
batch would go back to %RETRY% and delay its good messages with it, to no avail for the bad one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, InitVar, dataclass, field

from rocksidecar.delay import CancelOutcome, DelayedMessage, DelayState, DelayStore
from rocksidecar.rmq.consumer import ConsumeStatus
from rocksidecar.rmq.message import MessageExt, MessageQueue

from ..logs import Throttle
from .inner import CANCEL_ID, OP, OP_CANCEL, CancelRequest, InnerFormatError, Reject, Rules, parse

log = logging.getLogger(__name__)

Count = Callable[[str, int], None]  # (outcome, how many)
Rejected = Callable[[Reject], None]
LOG_WINDOW_S = 10.0  # at most one line per rejection reason per window
# What encoding a message for the delay store raises when a value does not fit (orjson's JSONEncodeError
# is a TypeError); not StorageError, which fails the whole batch: nothing of it was stored.
UNENCODABLE = (TypeError, ValueError, OverflowError)


@dataclass(eq=False)
class InnerListener:
    """``await listener(batch, queue)`` as the PushConsumer's MessageListener."""

    store: DelayStore
    rules: Rules
    _: KW_ONLY
    count: Count = lambda _o, _n: None
    rejected: Rejected = lambda _r: None
    clock: InitVar[Callable[[], float]] = time.monotonic
    # whether this replica keeps a copy of an id (app.dmq.replicas); others are skipped
    # (outcome "not_held"), their cancels too
    holds: Callable[[str], bool] = lambda _id: True
    _throttle: Throttle = field(init=False)
    # ids being stored now: a cancel for one waits for its store (concurrent listener calls may
    # run the cancel's batch while the message's batch is still syncing).
    _storing: dict[str, asyncio.Future[None]] = field(init=False, default_factory=dict)

    def __post_init__(self, clock: Callable[[], float]) -> None:
        self._throttle = Throttle(LOG_WINDOW_S, clock)
        # ids whose cancel is being stored now: a message for one is dropped, as after its tombstone.
        self._cancelling: set[str] = set()

    async def __call__(self, batch: Sequence[MessageExt], _mq: MessageQueue) -> ConsumeStatus:
        now = self.store.now_ms()
        lead = self.store.lead_ms()  # its due times are wall times: moved onto the store's clock by it
        new: dict[str, DelayedMessage] = {}
        cancels: list[str] = []
        for ext in batch:
            if not self.holds(_claimed_id(ext)):  # before parsing: every replica reads every message
                self.count("not_held", 1)
                continue
            try:
                item = parse(ext, now, self.rules, lead)
            except InnerFormatError as exc:
                self._reject(ext.msg_id, exc)  # redelivering cannot fix it: let the offset pass it
                continue
            if isinstance(item, CancelRequest):
                cancels.append(item.id)
                continue
            # One store lookup per message (an index scan and a read): it is most of the intake's cost
            # per message, and every replica reads every inner message.
            known = None if item.id in self._cancelling else self.store.get(item.id)
            if item.id in self._cancelling or (known is not None and known.state is DelayState.CANCELLED):
                self.count("cancelled_before", 1)
            elif known is not None or item.id in new or item.id in self._storing:
                self.count("duplicate", 1)
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
            stored = await self._store_each(msgs)
        finally:
            for m in msgs:
                self._storing.pop(m.id, None)
            done.set_result(None)
        self.count("scheduled", stored)

    async def _store_each(self, msgs: list[DelayedMessage]) -> int:
        """How many of ``msgs`` are stored, synced; one the store cannot encode is skipped, not its
        neighbours. Raises StorageError: the store failed (nothing stored; the batch is redelivered)."""
        try:
            await self.store.schedule_many(msgs)
            return len(msgs)
        except UNENCODABLE as exc:
            if len(msgs) == 1:
                self._reject(msgs[0].id, InnerFormatError(f"not storable: {exc}", Reject.UNSTORABLE))
                return 0
        return sum([await self._store_each([m]) for m in msgs])  # find it: one by one (rare)

    def _reject(self, id_: str, exc: InnerFormatError) -> None:
        self.count("malformed", 1)
        self.rejected(exc.reason)
        suppressed = self._throttle.allow((exc.reason,))
        if suppressed is not None:
            more = f" ({suppressed} more for this reason since the last such line)" if suppressed else ""
            log.warning(
                "inner message %s skipped: %s%s",
                id_,
                exc,
                more,
                extra={"event": "dmq_inner_rejected", "reason": exc.reason.value, "suppressed": suppressed},
            )

    async def _cancel(self, id_: str) -> None:
        outcome = await self._settle(id_, lambda: self.store.cancel(id_, remember_unknown=True))
        self.count(f"cancel_{outcome.value.lower()}", 1)

    async def drop_published(
        self, ids: list[str], dues: list[int | None] | None = None
    ) -> list[CancelOutcome]:
        """Another replica published ``ids`` (a mark, app.dmq.replication; ``dues``: their due times,
        where the mark said, DelayStore.drop_published_many): drop these copies, in step with a batch
        storing one of them now, as a cancel is; one synced write for them all."""
        self._cancelling.update(ids)  # before any await: a message batch running meanwhile must see them
        try:
            storing = {f for i in ids if (f := self._storing.get(i)) is not None}
            if storing:
                await asyncio.gather(*storing)
            return await self.store.drop_published_many(ids, dues)
        finally:
            self._cancelling.difference_update(ids)

    async def _settle(self, id_: str, settle: Callable[[], Awaitable[CancelOutcome]]) -> CancelOutcome:
        self._cancelling.add(id_)  # before any await: a message batch running meanwhile must see it
        try:
            storing = self._storing.get(id_)
            if storing is not None:
                await storing
            return await settle()
        finally:
            self._cancelling.discard(id_)


def _claimed_id(ext: MessageExt) -> str:
    """The id an inner message is about (its UNIQ_KEY, or a cancel's target), unchecked: only for
    placement; parse checks it."""
    props = ext.properties
    if props.get(OP) == OP_CANCEL:
        return props.get(CANCEL_ID) or ""
    return ext.uniq_key or ""
