"""What a subscription's listener (HttpPush, BulkPush, StreamHub) knows of the consumer that calls it, so
that a delivery nobody holds ends once it is not wanted any more (its queue dropped, the consumer closing)
and a failure is logged as moved to the DLQ only where the consumer acts on it; and the listener call
they share (ConsumerWired.deliver_each: one message after another, each traced)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.message import MessageExt, MessageQueue

from ..tracing import msgtrace, spans
from .log import DeliveryLog
from .spec import SubscriptionSpec


class Withdrawn(spans.Withdrawn):
    """A delivery waiting out the app's "later" (or, gRPC, for a stream) gave the message up instead of
    offering it again: its queue was dropped (rebalanced away: the new owner delivers it) or its consumer
    began closing (it is delivered again after the restart). Not a failure (spans.Withdrawn): no message
    trace record."""


async def traced(msg: MessageExt, group: str, endpoint: str, delivery: Awaitable[bool]) -> bool:
    """One delivery to the app (HTTP or gRPC) inside its consume span (spans on), recorded as the
    message trace's SubBefore/SubAfter pair (message trace on). A delivery withdrawn before the app had it
    (spans.Withdrawn, raised through) records no pair: the app never saw it, its queue's new owner
    delivers it and records that."""
    started = msgtrace.now_ms()
    ok = await (spans.process(msg, group, endpoint, delivery) if spans.ON else delivery)
    msgtrace.consumed(msg, group, started, ok)
    return ok


def log_if_dead(
    log: DeliveryLog,
    spec: SubscriptionSpec,
    msg: MessageExt,
    why: str,
    acted_on: Callable[[], MessageExt | None] | None = None,
) -> None:
    """A failed message that has used up its reconsumes goes to the group's DLQ now: the broker moves it
    there when it is sent back (concurrent), the consumer sends it there (orderly). ``acted_on``: asked
    only then, the message as the consumer holds it when it acts on this failure at all, else None
    (ConsumerWired.acted_on). Its count decides: a message consumed here again after a failed send-back
    shows the listener one reconsume more than the broker's stored copy, from which the broker counts."""
    if msg.reconsume_times < spec.max_reconsume_times:
        return  # the listener's count is never below the held one's: nothing to look up (the hot path)
    held = msg if acted_on is None else acted_on()
    if held is not None and held.reconsume_times >= spec.max_reconsume_times:
        log.moved_to_dlq(spec.name, spec.group, msg.msg_id, f"{why} {held.reconsume_times + 1} times")


def failure_status(spec: SubscriptionSpec) -> ConsumeStatus:
    """The consume status of a failed delivery of ``spec``'s messages: an orderly queue retries the
    message in place (SUSPEND), a concurrent one sends it back to the broker (RECONSUME_LATER)."""
    return ConsumeStatus.SUSPEND if spec.orderly else ConsumeStatus.RECONSUME_LATER


class ConsumerWired:
    """A listener the runner wires to its consumer (``process_queue``, ``wait_closing``); the class using
    it sets ``spec``, ``_log``, ``_failed`` (its consume status for a failure: failure_status) and
    ``_sleep``, and delivers one message (``deliver``)."""

    # The process queue of a message queue the consumer owns now, and its wait_closing. Unwired (a listener
    # alone) every call is taken as the consumer's own and a "later" is waited out whatever happens.
    process_queue: Callable[[MessageQueue], ProcessQueue | None] | None = None
    wait_closing: Callable[[float], Awaitable[bool]] | None = None
    spec: SubscriptionSpec
    _log: DeliveryLog
    _failed: ConsumeStatus
    _sleep: Callable[[float], Awaitable[None]]

    async def deliver(self, msg: MessageExt, mq: MessageQueue, pq: ProcessQueue | None = None) -> bool:
        raise NotImplementedError

    async def deliver_each(
        self, msgs: Sequence[MessageExt], mq: MessageQueue, endpoint: str
    ) -> ConsumeStatus:
        """The listener call: each message delivered in turn (traced to ``endpoint``), the first failure
        ending it; a delivery withdrawn (its queue dropped, the consumer closing) ends it with a result
        the consumer ignores (withdrawn)."""
        pq = self.queue_of(mq)  # before the first delivery
        for msg in msgs:
            try:
                if spans.ON or msgtrace.DISPATCHER is not None:  # tracing off: this one check per message
                    ok = await traced(msg, self.spec.group, endpoint, self.deliver(msg, mq, pq))
                else:
                    ok = await self.deliver(msg, mq, pq)
            except Withdrawn:
                # Dropped: a result the consumer ignores. Were it not ignored, a failure would only deliver
                # it again, where success could commit past what the new owner has not consumed yet.
                return self.withdrawn(pq, msg)
            if not ok:
                log_if_dead(self._log, self.spec, msg, "failed", partial(self.acted_on, pq, msg))
                return self._failed
        return ConsumeStatus.SUCCESS

    def queue_of(self, mq: MessageQueue) -> ProcessQueue | None:
        """``mq``'s process queue, looked up when a call begins: a queue dropped and added again later has
        a new one, which pulls the call's messages again."""
        return self.process_queue(mq) if self.process_queue is not None else None

    def withdrawn(self, pq: ProcessQueue | None, msg: MessageExt) -> ConsumeStatus:
        """The result of a call whose delivery of ``msg`` was withdrawn (Withdrawn): one the consumer
        ignores."""
        if self.acted_on(pq, msg) is not None:
            # The consumer is closing, and drops its queues only once the calls running have ended: any
            # status would be acted on (RECONSUME_LATER sends the message back, a retry used on every
            # SIGTERM; SUCCESS commits what the app never took). Cancelled, as close() cancels a call it
            # stops waiting for: nothing is sent back or committed, the restart delivers it again.
            raise asyncio.CancelledError
        # Dropped: the consumer ignores its result. Outside any queue's flow (an operator's direct
        # resend): nothing is sent back whatever it is, and its request is answered.
        return self._failed

    def acted_on(self, pq: ProcessQueue | None, msg: MessageExt) -> MessageExt | None:
        """Whether the consumer acts on this call's failure of ``msg`` (so a move to the DLQ may be logged
        for it): the message as held in its queue's process queue, which was not dropped meanwhile
        (ProcessQueue.held: also for a copy consumed again after a failed send-back), else None. Not
        for an operator's resend (CONSUME_MESSAGE_DIRECTLY: outside any queue's flow, nothing is sent back
        whatever the answer), nor a queue rebalanced away while the app had the message (the consumer
        ignores the result: its new owner delivers it). Unwired (no consumer told): taken as acted on."""
        if self.process_queue is None:
            return msg
        return pq.held(msg) if pq is not None and not pq.dropped else None

    async def wait_out(self, seconds: float, pq: ProcessQueue | None) -> None:
        """Sleep out the app's "later", or less when the consumer begins closing; then Withdrawn, not
        another offer, when the consumer is closing or the message's queue (``pq``) was dropped."""
        wait_closing = self.wait_closing
        if wait_closing is None:
            await self._sleep(seconds)
            return
        sleep = asyncio.ensure_future(self._sleep(seconds))
        closing = asyncio.ensure_future(wait_closing(seconds))
        try:
            await asyncio.wait((sleep, closing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
            closing.cancel()
        closed = closing.done() and not closing.cancelled() and closing.result()
        if closed or (pq is not None and pq.dropped):
            raise Withdrawn
