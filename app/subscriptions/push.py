"""Push one subscription's messages to the app by HTTP POST and turn its answer into a consume status.

The app decides: 2xx is done; 429 or 503 means "later" (its Retry-After is honoured) and is not a
failure, so the message is offered again without counting a reconsume; any other status, a connection
error or no answer within the subscription's timeout is a failure: the message is sent back to the
broker (concurrent mode) or retried in place (orderly mode), and goes to the group's DLQ after
max_reconsume_times.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from rocksidecar.pipeline.backoff import parse_retry_after
from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.message import MessageExt, MessageQueue

from ..http_client import HttpClient, PostError
from .cloudevents import HeaderLines
from .log import DeliveryLog
from .spec import SubscriptionSpec
from .withdraw import ConsumerWired, Withdrawn, failure_status, log_if_dead, traced

__all__ = [  # Withdrawn, log_if_dead and traced re-exported (they moved to withdraw.py)
    "DEFAULT_LATER_S",
    "LATER_STATUSES",
    "MAX_LATER_S",
    "MIN_LATER_S",
    "DeliveryHook",
    "HttpPush",
    "Withdrawn",
    "later_s",
    "log_if_dead",
    "retry_after_s",
    "traced",
]

LATER_STATUSES = (429, 503)
DEFAULT_LATER_S = 1.0  # 429/503 without a usable Retry-After
MAX_LATER_S = 300.0  # a Retry-After beyond this is capped: the message must not sleep for days
# A Retry-After of 0 (or a date in the past) waits this much: an app answering 503 "now" to every POST was
# POSTed again at once, forever (~2 900 POSTs a second for one message, a core spent on it).
MIN_LATER_S = 0.1

# (subscription, outcome, seconds, the message) after each POST; outcome is ok, later, failed (app's
# answer) or error (no answer: connection refused, timeout). The message: for the latency's exemplar.
DeliveryHook = Callable[[str, str, float, MessageExt], None]


def retry_after_s(value: str | None, now_s: float) -> float:
    """Seconds to wait after a 429/503 from the app: its Retry-After, within [MIN_LATER_S, MAX_LATER_S];
    the default without one."""
    seconds = parse_retry_after(value, now_s)
    return DEFAULT_LATER_S if seconds is None else later_s(seconds)


def later_s(seconds: float) -> float:
    """The app's "later" (Retry-After, gRPC's retry_after_ms) within [MIN_LATER_S, MAX_LATER_S]."""
    return min(max(seconds, MIN_LATER_S), MAX_LATER_S)


class HttpPush(ConsumerWired):
    """The PushConsumer's listener of one subscription; wired by the runner to its consumer
    (ConsumerWired)."""

    def __init__(
        self,
        spec: SubscriptionSpec,
        client: HttpClient,
        *,
        on_delivery: DeliveryHook | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_s: Callable[[], float] = time.time,
        log: DeliveryLog | None = None,
    ) -> None:
        self.spec = spec
        self._log = log or DeliveryLog()
        self._client = client
        self._on_delivery = on_delivery or (lambda _s, _o, _t, _p: None)
        self._sleep = sleep
        self._wall_s = wall_s
        self._failed = failure_status(spec)
        self._header_lines = HeaderLines(spec.group)

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        # consume_batch_size is 1: one CloudEvent per POST
        return await self.deliver_each(msgs, mq, self.spec.endpoint)

    async def later(self, retry_after: str | None, pq: ProcessQueue | None) -> None:
        """Wait out the app's 429/503 (its Retry-After): ConsumerWired.wait_out."""
        await self.wait_out(retry_after_s(retry_after, self._wall_s()), pq)

    async def deliver(self, msg: MessageExt, mq: MessageQueue, pq: ProcessQueue | None = None) -> bool:
        """POST until the app takes it (True) or fails it (False); 429/503 wait and try again, unless
        meanwhile ``pq`` (the message's process queue) was dropped or the consumer began closing:
        Withdrawn."""
        lines = self._header_lines(msg, mq)
        spec, on_delivery = self.spec, self._on_delivery
        while True:
            started = time.perf_counter()
            try:
                resp = await self._client.post_lines(spec.endpoint, lines, msg.body, spec.timeout_s)
            except PostError as exc:
                on_delivery(spec.name, "error", time.perf_counter() - started, msg)
                self._log.no_answer(spec.name, str(exc), msg.msg_id)
                return False
            elapsed = time.perf_counter() - started
            if 200 <= resp.status < 300:
                on_delivery(spec.name, "ok", elapsed, msg)
                return True
            self._log.answered(spec.name, resp.status, msg.msg_id)
            if resp.status in LATER_STATUSES:
                on_delivery(spec.name, "later", elapsed, msg)
                await self.later(resp.headers.get("retry-after"), pq)
                continue
            on_delivery(spec.name, "failed", elapsed, msg)
            return False
