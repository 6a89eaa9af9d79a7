"""Deliveries of a subscription to apps that pull over gRPC (Subscribe), answered by Ack.

The PushConsumer's listener puts each message in the hub's queue and waits: a stream takes it, the
app answers by delivery id. No answer within the subscription's timeout is a failure (sent back, then
redelivered by the broker); LATER waits and offers it again; a stream that ends without answering hands
the message to the next stream (no failure counted, unless MAX_LOST streams have ended so with it: one
no client can take would go round the streams for ever). With no stream attached, messages wait; one
whose queue was dropped meanwhile (rebalanced away, or closing) is never handed to a stream. Once the
consumer begins closing, a message no stream has taken, or one waiting out its LATER, is given up at once
(ConsumerWired): no app holds it, so close() need not wait for it.
"""

from __future__ import annotations

import asyncio
import enum
import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.message import MessageExt, MessageQueue

from .log import DeliveryLog
from .push import DEFAULT_LATER_S, DeliveryHook, later_s
from .spec import SubscriptionSpec
from .withdraw import ConsumerWired, Withdrawn, failure_status

# Streams that may end, one after another, without answering a delivery before it counts as failed.
MAX_LOST = 3


class Answer(enum.Enum):
    OK = "ok"
    LATER = "later"
    FAILED = "failed"
    LOST = "lost"  # the stream ended before answering: offer it again at once
    DROPPED = "dropped"  # its queue was dropped before a stream took it: no stream gets it


@dataclass(eq=False)
class Delivery:
    delivery_id: str
    msg: MessageExt
    mq: MessageQueue
    pq: ProcessQueue | None = None  # the queue as it was when the listener call began
    # Done once a stream took it. A future, not an Event: the listener call waits for it and for the
    # consumer's closing at once without a task of its own per message.
    taken: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    answer: asyncio.Future[tuple[Answer, float]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class UnknownDelivery(LookupError):
    pass


class QueueDropped(Withdrawn):
    """The message's queue was dropped before any stream took it: its new owner delivers it. Not a
    failure: its spans end marked dropped, without an error (spans.Withdrawn), and it leaves no message
    trace record (push.traced records only deliveries that ended)."""


class StreamHub(ConsumerWired):
    """The listener of one gRPC subscription, and what Subscribe/Ack work on; wired by the runner to its
    consumer (ConsumerWired: without it, no delivery counts as dropped and closing ends no wait)."""

    def __init__(
        self,
        spec: SubscriptionSpec,
        *,
        on_delivery: DeliveryHook | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        log: DeliveryLog | None = None,
    ) -> None:
        self.spec = spec
        self._log = log or DeliveryLog()
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._open: dict[str, Delivery] = {}  # taken by a stream, not answered yet
        self._on_delivery = on_delivery or (lambda _s, _o, _t, _p: None)
        self._sleep = sleep
        self._failed = failure_status(spec)
        self.streams = 0
        self._forgetting = False
        self._closing: asyncio.Future[bool] | None = None  # see closing()

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        return await self.deliver_each(msgs, mq, "grpc")

    async def deliver(self, msg: MessageExt, mq: MessageQueue, pq: ProcessQueue | None = None) -> bool:
        """True when the app took it, False when it failed or timed out; QueueDropped when ``pq`` (the
        message's process queue) was dropped before a stream took it, Withdrawn when the consumer began
        closing before a stream took it or while it waited out LATER (or ``pq`` was dropped then)."""
        loop = asyncio.get_running_loop()
        lost = 0
        while True:
            d = Delivery(uuid.uuid4().hex, msg, mq, pq)
            try:
                await self._queue.put(d)
                # no timeout here: with no app attached the message waits, until the consumer closes
                closing = self.closing()
                await asyncio.wait(
                    (d.taken,) if closing is None else (d.taken, closing), return_when=asyncio.FIRST_COMPLETED
                )
                if not d.taken.done():
                    raise Withdrawn  # closing: no app has it (finally: no stream will take it)
                started = loop.time()
                # On the answer itself, not a copy one callback behind it (shield): an Ack taken in the
                # turn the timer fires counts, as the Ack RPC was answered OK.
                await asyncio.wait((d.answer,), timeout=self.spec.timeout_s)
                answered = d.answer.done()
            finally:
                self._open.pop(d.delivery_id, None)
                # Unanswered (timed out, or this delivery cancelled): nobody waits for an answer now. Done,
                # so the stream that took it lets it go (it kept every timed-out one, body and all, for
                # as long as it lived) and a stream never takes it from the queue. An Ack for it is
                # refused as before: it is no longer open.
                d.answer.cancel()  # nothing when answered
                if not d.taken.done() and not self._forgetting:
                    # Once per turn: the consume timeout's sweep and close() cancel every waiting call
                    # at once, and a pass over the queue for each took 0.4 s for a thousand.
                    self._forgetting = True
                    loop.call_soon(self._forget_cancelled)
            if not answered:  # no answer in time: a failure, the broker redelivers it later
                self._on_delivery(self.spec.name, "error", loop.time() - started, msg)
                return False
            answer, later_s = d.answer.result()
            if answer is Answer.DROPPED:
                raise QueueDropped(mq)
            if answer is Answer.LOST:
                lost += 1
                if lost < MAX_LOST:
                    continue
                # Every stream it went to ended: one no client takes (a body over its receive limit)
                # would go round them for ever. A failure: sent back, dead-lettered in the end.
                self._on_delivery(self.spec.name, "error", loop.time() - started, msg)
                return False
            self._on_delivery(self.spec.name, answer.value, loop.time() - started, msg)
            if answer is Answer.OK:
                return True
            if answer is Answer.FAILED:
                return False
            if answer is Answer.LATER:
                await self.wait_out(later_s, pq)  # Withdrawn when its queue was dropped or closing began

    def closing(self) -> asyncio.Future[bool] | None:
        """Done (True) once the consumer began closing; one wait shared by every delivery of the hub (one
        each would be a task more per message). None when unwired."""
        if self._closing is None and self.wait_closing is not None:
            self._closing = asyncio.ensure_future(self.wait_closing(math.inf))  # ends when closing
        return self._closing

    async def next(self) -> Delivery:
        """The next delivery for a stream; the caller must call ``lost`` for it if the stream ends."""
        while True:
            d = await self._queue.get()
            if d.answer.done():
                continue
            if self._closing is not None and self._closing.done():
                continue  # the consumer is closing: its listener call gives it up (deliver), no app gets it
            if d.pq is not None and d.pq.dropped:
                # Rebalanced away before any app had it: the new owner delivers it from the committed
                # offset, so handed out here it would reach two apps (Java's ConsumeRequest checks
                # processQueue.isDropped() before the listener; this wait for a stream is that step).
                d.answer.set_result((Answer.DROPPED, 0.0))
                d.taken.set_result(None)  # wakes its listener call, which sees the answer
                continue
            self._open[d.delivery_id] = d
            d.taken.set_result(None)
            return d

    def _forget_cancelled(self) -> None:
        """Drop the cancelled deliveries from the queue now: with no stream to skip them they kept their
        bodies for as long as no app attached (the consume timeout cancels a waiting call daily)."""
        self._forgetting = False
        waiting = [self._queue.get_nowait() for _ in range(self._queue.qsize())]
        for d in waiting:
            if not d.answer.done():
                self._queue.put_nowait(d)

    def ack(self, delivery_id: str, answer: Answer, retry_after_ms: int = 0) -> None:
        d = self._open.pop(delivery_id, None)
        if d is None or d.answer.done():
            raise UnknownDelivery(delivery_id)
        wait_s = later_s(retry_after_ms / 1000) if retry_after_ms > 0 else DEFAULT_LATER_S
        d.answer.set_result((answer, wait_s))

    def lost(self, deliveries: Sequence[Delivery]) -> None:
        """A stream ended: its unanswered deliveries go to the next stream."""
        for d in deliveries:
            self._open.pop(d.delivery_id, None)
            if not d.answer.done():
                d.answer.set_result((Answer.LOST, 0.0))

    def owns(self, delivery_id: str) -> bool:
        return delivery_id in self._open
