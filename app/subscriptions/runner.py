"""One PushConsumer per subscription, each pushing to the app through HttpPush; started and stopped
with the sidecar. Also what the metrics and the status page read: queues owned, lag, in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rocksidecar.rmq import ClientInstance
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, PushConsumer
from rocksidecar.rmq.consumer.allocate import AllocateStrategy, Averagely
from rocksidecar.rmq.consumer.bounded_hash import BoundedHash
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.sticky import AllocateSticky
from rocksidecar.rmq.message import MessageQueue

from ..http_client import HttpClient
from .bulk import BulkPush
from .log import DeliveryLog
from .push import DeliveryHook, HttpPush
from .spec import SubscriptionSpec
from .stream import StreamHub

_ALLOCATIONS: dict[str, Callable[[], AllocateStrategy]] = {
    "averagely": Averagely,
    "bounded_hash": BoundedHash,
    "sticky": AllocateSticky,
}
_CONSUME_FROM = {
    "last": ConsumeFrom.LAST_OFFSET,
    "first": ConsumeFrom.FIRST_OFFSET,
    "timestamp": ConsumeFrom.TIMESTAMP,
}
# The listener holds a message while the app answers 429/503 (that is not a failure), so the
# consumer's own timeout must not cut it; each POST has the subscription's timeout instead.
HOLD_S = 24 * 3600.0
# Java persists offsets every 5 s; a SIGKILLed sidecar would then redeliver up to 5 s of messages. Pulls
# commit too, but a long-polling pull may be held for 15 s. Twice a second bounds the duplicates after a
# crash to what was in flight plus half a second of deliveries, for one small request per queue.
PERSIST_S = 0.5
LAG_TIMEOUT_S = 2.0
# On SIGTERM each consumer waits this long at most for what its app holds (a delivery not answered by
# then is not committed: redelivered after the restart); the rest of the stop needs time too.
CLOSE_WAIT_MAX_S = 10.0
CLOSE_WAIT_SHARE = 0.5


def close_wait_s(shutdown_grace_s: float) -> float:
    """How long the consumers' close waits for the deliveries in flight: half the shutdown grace, at
    most 10 s (the client's default), so that stopping the whole sidecar fits in the grace."""
    return min(CLOSE_WAIT_MAX_S, shutdown_grace_s * CLOSE_WAIT_SHARE)


@dataclass(frozen=True, slots=True)
class QueueLag:
    """One queue of a subscription: the broker's max offset, our committed offset and what is in flight."""

    subscription: str
    topic: str
    broker: str
    queue_id: int
    max_offset: int
    committed: int
    in_flight: int

    @property
    def lag(self) -> int:
        return max(self.max_offset - max(self.committed, 0), 0)


def consumer_config(
    spec: SubscriptionSpec, instance_name: str | None = None, close_timeout_s: float = CLOSE_WAIT_MAX_S
) -> ConsumerConfig:
    return ConsumerConfig(
        group=spec.group,
        instance_name=instance_name,
        consume_timeout_s=HOLD_S,
        persist_interval_s=PERSIST_S,
        consume_from=_CONSUME_FROM[spec.consume_from],
        consume_timestamp_ms=spec.consume_timestamp_ms,
        allocate=_ALLOCATIONS[spec.allocation](),
        orderly=spec.orderly,
        consume_concurrency=spec.concurrency,
        max_reconsume_times=spec.max_reconsume_times,
        commit_window=spec.commit_window,
        consume_batch_size=spec.bulk_max_messages if spec.bulk else 1,
        max_body_bytes=spec.max_body_bytes,
        close_timeout_s=close_timeout_s,
    )


def _process_queues(consumer: PushConsumer) -> Callable[[MessageQueue], ProcessQueue | None]:
    def process_queue(mq: MessageQueue) -> ProcessQueue | None:
        state = consumer.queues.get(mq)
        return state.pq if state is not None else None

    return process_queue


class Subscriptions:
    def __init__(
        self,
        specs: Sequence[SubscriptionSpec],
        namesrv: str,
        *,
        on_delivery: DeliveryHook | None = None,
        instance_name: str | None = None,
        instance: ClientInstance | None = None,
        close_timeout_s: float = CLOSE_WAIT_MAX_S,
    ) -> None:
        """``instance``: the process's client instance (one client id, route table, set of connections
        and heartbeat shared with the producer); without one each consumer makes its own.
        ``close_timeout_s``: how long close() waits for the deliveries in flight (close_wait_s)."""
        self.specs = tuple(specs)
        # one keep-alive connection per POST in flight, so up to the subscription's concurrency
        self._http = HttpClient()
        self.log = DeliveryLog()  # failures and dead letters, throttled per cause
        self._flusher: asyncio.Task[None] | None = None
        # close() has begun: start() starts nothing more. A consumer's own close() before its start()
        # returns at once without marking it closed (nothing to undo yet), so start() must not go on.
        self._closed = False
        self.consumers: dict[str, PushConsumer] = {}
        self.hubs: dict[str, StreamHub] = {}  # subscriptions the app pulls over gRPC
        for spec in self.specs:
            listener: StreamHub | HttpPush
            if spec.grpc:
                listener = self.hubs[spec.name] = StreamHub(spec, on_delivery=on_delivery, log=self.log)
            else:
                kind = BulkPush if spec.bulk else HttpPush
                listener = kind(spec, self._http, on_delivery=on_delivery, log=self.log)
            consumer = PushConsumer(
                consumer_config(spec, instance_name, close_timeout_s), namesrv, listener, instance=instance
            )
            consumer.subscribe(spec.topic, spec.expression, spec.expression_type)
            self.consumers[spec.name] = consumer
            # So that the hub hands no stream a message of a queue dropped meanwhile, a delivery nobody holds
            # (waiting out the app's "later"; gRPC: waiting for a stream) stops once it is not wanted any
            # more, and a failure is logged as moved to the DLQ only where the consumer acts on it.
            listener.process_queue = _process_queues(consumer)
            listener.wait_closing = consumer.wait_closing

    async def start(self) -> None:
        """Start every consumer; a broker that cannot be reached now is retried by the consumer's own
        loops (rebalance every 20 s), so the sidecar still starts and sends. close() meanwhile: it returns
        with what it started closed (the consumer being started stops after its current step) and the
        rest not started."""
        for consumer in self.consumers.values():
            if self._closed:
                return
            await consumer.start()
        if self._flusher is None and not self._closed:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while True:  # the summaries of a storm that has ended are written here
            await asyncio.sleep(self.log.window_s)
            self.log.flush()

    async def close(self) -> None:
        """Close every consumer (persist offsets, unregister so the group rebalances at once)."""
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        self.log.flush()
        # All at once: each stops pulling at its close's first step, then waits up to close_timeout_s for
        # what its app holds. One after another, the others went on delivering new messages after SIGTERM,
        # and N subscriptions took N waits, past the grace stop() has (what came after was never closed).
        await asyncio.gather(*(c.close() for c in self.consumers.values()), return_exceptions=True)
        await self._http.close()

    def rebalances(self) -> dict[str, int]:
        return {name: c.stats["rebalances_done"] for name, c in self.consumers.items()}

    def operator_actions(self) -> dict[tuple[str, str], int]:
        """Per subscription: queues an operator's reset moved, messages an operator resent to it."""
        actions = (("reset", "offsets_reset"), ("resend", "consumed_directly"))
        return {
            (name, action): c.stats[stat] for name, c in self.consumers.items() for action, stat in actions
        }

    def undecodable(self) -> dict[str, int]:
        """Messages each subscription's consumer could not decode (and sent to its group's DLQ)."""
        return {name: c.stats["undecodable"] for name, c in self.consumers.items()}

    async def lags(self) -> list[QueueLag]:
        """Per owned queue: the broker's max offset, the group's committed offset, messages cached."""
        rows: list[QueueLag] = []
        for name, consumer in self.consumers.items():
            for mq, state in list(consumer.queues.items()):
                # the master, else the slave the queue is consumed from while the master is down
                addr = consumer.read_addr(mq.broker_name)
                if addr is None:
                    continue
                try:
                    max_offset = await consumer.api.get_max_offset(addr, mq, LAG_TIMEOUT_S)
                except Exception:  # a broker down: no row rather than a failed page
                    continue
                committed = await consumer.offsets.read(mq, ReadType.MEMORY)
                rows.append(
                    QueueLag(
                        name,
                        mq.topic,
                        mq.broker_name,
                        mq.queue_id,
                        max_offset,
                        committed if committed is not None else state.pq.committed_offset(),
                        state.pq.count,
                    )
                )
        return rows
