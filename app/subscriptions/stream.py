"""Deliveries of a subscription to apps that pull over gRPC (Subscribe), answered by Ack.

The PushConsumer's listener puts each message in the hub's queue and waits: a stream takes it, the
app answers by delivery id. No answer within the subscription's timeout is a failure (sent back, then
redelivered by the broker); LATER waits and offers it again; a stream that ends without answering hands
the message to the next stream (no failure counted, unless MAX_LOST streams have ended so with it: one
no client can take would go round the streams for ever). With no stream attached, messages wait.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.message import MessageExt, MessageQueue

from ..tracing import msgtrace, spans
from .log import DeliveryLog
from .push import DEFAULT_LATER_S, DeliveryHook, later_s, log_if_dead, traced
from .spec import SubscriptionSpec

# Streams that may end, one after another, without answering a delivery before it counts as failed.
MAX_LOST = 3


class Answer(enum.Enum):
    OK = "ok"
    LATER = "later"
    FAILED = "failed"
    LOST = "lost"  # the stream ended before answering: offer it again at once


@dataclass(eq=False)
class Delivery:
    delivery_id: str
    msg: MessageExt
    mq: MessageQueue
    taken: asyncio.Event = field(default_factory=asyncio.Event)
    answer: asyncio.Future[tuple[Answer, float]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class UnknownDelivery(LookupError):
    pass


class StreamHub:
    """The listener of one gRPC subscription, and what Subscribe/Ack work on."""

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
        self._failed = ConsumeStatus.SUSPEND if spec.orderly else ConsumeStatus.RECONSUME_LATER
        self.streams = 0

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        for msg in msgs:
            if spans.ON or msgtrace.DISPATCHER is not None:  # tracing off: this one check per message
                ok = await traced(msg, self.spec.group, "grpc", self.deliver(msg, mq))
            else:
                ok = await self.deliver(msg, mq)
            if not ok:
                log_if_dead(self._log, self.spec, msg, "failed")
                return self._failed
        return ConsumeStatus.SUCCESS

    async def deliver(self, msg: MessageExt, mq: MessageQueue) -> bool:
        loop = asyncio.get_running_loop()
        lost = 0
        while True:
            d = Delivery(uuid.uuid4().hex, msg, mq)
            try:
                await self._queue.put(d)
                await d.taken.wait()  # no timeout here: with no app attached the message waits
                started = loop.time()
                answer, later_s = await asyncio.wait_for(asyncio.shield(d.answer), self.spec.timeout_s)
            except TimeoutError:  # no answer in time: a failure, the broker redelivers it later
                self._on_delivery(self.spec.name, "error", loop.time() - started, msg)
                return False
            finally:
                self._open.pop(d.delivery_id, None)
                # Unanswered (timed out, or this delivery cancelled): nobody waits for an answer now. Done,
                # so the stream that took it lets it go (it kept every timed-out one, body and all, for
                # as long as it lived) and a stream never takes it from the queue. An Ack for it is
                # refused as before: it is no longer open.
                d.answer.cancel()  # nothing when answered
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
                await self._sleep(later_s)

    async def next(self) -> Delivery:
        """The next delivery for a stream; the caller must call ``lost`` for it if the stream ends."""
        while True:
            d = await self._queue.get()
            if d.answer.done():
                continue
            self._open[d.delivery_id] = d
            d.taken.set()
            return d

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
