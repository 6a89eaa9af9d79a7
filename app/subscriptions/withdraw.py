"""What a subscription's listener (HttpPush, BulkPush, StreamHub) knows of the consumer that calls it, so
that a delivery nobody holds ends once it is not wanted any more (its queue dropped, the consumer closing)
and a failure is logged as moved to the DLQ only where the consumer acts on it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.message import MessageExt, MessageQueue

from ..tracing import spans


class Withdrawn(spans.Withdrawn):
    """A delivery waiting out the app's "later" (or, gRPC, for a stream) gave the message up instead of
    offering it again: its queue was dropped (rebalanced away: the new owner delivers it) or its consumer
    began closing (it is delivered again after the restart). Not a failure (spans.Withdrawn): no message
    trace record."""


class ConsumerWired:
    """A listener the runner wires to its consumer (``process_queue``, ``wait_closing``); the class using
    it sets ``_failed`` (its consume status for a failure) and ``_sleep``."""

    # The process queue of a message queue the consumer owns now, and its wait_closing. Unwired (a listener
    # alone) every call is taken as the consumer's own and a "later" is waited out whatever happens.
    process_queue: Callable[[MessageQueue], ProcessQueue | None] | None = None
    wait_closing: Callable[[float], Awaitable[bool]] | None = None
    _failed: ConsumeStatus
    _sleep: Callable[[float], Awaitable[None]]

    def queue_of(self, mq: MessageQueue) -> ProcessQueue | None:
        """``mq``'s process queue, looked up when a call begins: a queue dropped and added again later has
        a new one, which pulls the call's messages again."""
        return self.process_queue(mq) if self.process_queue is not None else None

    def withdrawn(self, pq: ProcessQueue | None, msg: MessageExt) -> ConsumeStatus:
        """The result of a call whose delivery of ``msg`` was withdrawn (Withdrawn): one the consumer
        ignores."""
        if self.acted_on(pq, msg):
            # The consumer is closing, and drops its queues only once the calls running have ended: any
            # status would be acted on (RECONSUME_LATER sends the message back, a retry used on every
            # SIGTERM; SUCCESS commits what the app never took). Cancelled, as close() cancels a call it
            # stops waiting for: nothing is sent back or committed, the restart delivers it again.
            raise asyncio.CancelledError
        # Dropped: the consumer ignores its result. Outside any queue's flow (an operator's direct
        # resend): nothing is sent back whatever it is, and its request is answered.
        return self._failed

    def acted_on(self, pq: ProcessQueue | None, msg: MessageExt) -> bool:
        """Whether the consumer acts on this call's failure of ``msg`` (so a move to the DLQ may be logged
        for it): the message is held in its queue's process queue, which was not dropped meanwhile. Not
        for an operator's resend (CONSUME_MESSAGE_DIRECTLY: outside any queue's flow, nothing is sent back
        whatever the answer), nor a queue rebalanced away while the app had the message (the consumer
        ignores the result: its new owner delivers it). Unwired (no consumer told): taken as acted on."""
        if self.process_queue is None:
            return True
        # only on a failure with no reconsume left: the scan of the cached messages is off the hot path
        return (
            pq is not None
            and not pq.dropped
            and any(m.queue_offset == msg.queue_offset for m in pq.messages())
        )

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
