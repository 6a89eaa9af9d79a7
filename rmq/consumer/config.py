"""Settings and listener types of the push consumer; defaults are those of Java's DefaultMQPushConsumer."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..message import MessageExt, MessageQueue
from ..message_codec import MAX_BODY_BYTES
from .allocate import AllocateStrategy, Averagely

DLQ_PREFIX = "%DLQ%"
# maxReconsumeTimes -1 (unset), as Java reads it: 16 in concurrent mode (DefaultMQPushConsumerImpl
# .getMaxReconsumeTimes), Integer.MAX_VALUE in orderly mode (ConsumeMessageOrderlyService's): an orderly
# member retries a failing message for as long as it fails and never gives it up to the DLQ.
CONCURRENT_MAX_RECONSUME_TIMES = 16
ORDERLY_MAX_RECONSUME_TIMES = 2**31 - 1


def default_max_reconsume_times(orderly: bool) -> int:
    """Java's reading of maxReconsumeTimes -1 (unset) for a consumer of this mode."""
    return ORDERLY_MAX_RECONSUME_TIMES if orderly else CONCURRENT_MAX_RECONSUME_TIMES


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"  # the group shares the queues; offsets on the brokers
    BROADCASTING = "BROADCASTING"  # every member consumes every queue; offsets in a local file


class ConsumeFrom(enum.Enum):
    """Where a group starts on a queue it has no committed offset for."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeStatus(enum.Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"  # concurrent mode: send back, deliver again after a delay
    SUSPEND = "SUSPEND_CURRENT_QUEUE_A_MOMENT"  # orderly mode: retry the same message in a moment
    # Beyond Java: concurrent mode, never retry this message: straight to the group's %DLQ% topic
    # (as a message past max_reconsume_times); broadcasting has no DLQ: logged and skipped.
    DEAD_LETTER = "DEAD_LETTER"


# The app's handler: a batch of messages of one queue (one message unless consume_batch_size > 1).
# Concurrent mode: one status for the batch, or one per message in the batch's order (as Java's
# ackIndex, but any message may fail alone). Orderly mode: one status for the batch.
ListenerResult = ConsumeStatus | Sequence[ConsumeStatus]
MessageListener = Callable[[Sequence[MessageExt], MessageQueue], Awaitable[ListenerResult]]


@dataclass
class ConsumerConfig:
    group: str
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from: ConsumeFrom = ConsumeFrom.LAST_OFFSET
    consume_timestamp_ms: int | None = None  # for TIMESTAMP; None: half an hour ago, as Java
    orderly: bool = False
    allocate: AllocateStrategy = field(default_factory=Averagely)
    instance_name: str | None = None  # None: pid#nanotime, as Java's DEFAULT instance
    client_ip: str | None = None
    unit_name: str | None = None
    consume_concurrency: int = 20  # the worker pool of concurrent mode (consumeThreadMax)
    consume_batch_size: int = 1
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000  # cached messages per queue before pulling pauses
    pull_threshold_size_for_queue_mib: int = 100
    consume_max_span: int = 2000  # concurrent mode: pause when the oldest cached message is this far behind
    suspend_s: float = 15.0  # how long the broker holds a pull with no new message
    pull_timeout_s: float = 30.0
    pull_delay_on_error_s: float = 3.0
    # A pull answered at once with nothing new (a broker that does not hold it, broken or malicious):
    # the next comes this long after the previous one was sent, not at once. A held pull is longer.
    pull_min_interval_empty_s: float = 1.0
    # The broker said the offset is illegal and where to go: re-add the queue from there after this, so
    # that a broker saying so every time is not asked in a loop (Java waits 10 s; a Rock-DMQ replica on
    # an empty volume meets it on every queue at start, hence less).
    offset_illegal_wait_s: float = 1.0
    rebalance_interval_s: float = 20.0
    persist_interval_s: float = 5.0
    heartbeat_interval_s: float = 30.0  # and the route refresh
    route_retry_s: float = 1.0  # a subscribed topic without a route: ask again after 1 s, doubling
    lock_interval_s: float = 20.0  # orderly: renew the broker's queue locks (they lapse after 60 s)
    lock_max_live_s: float = 30.0  # orderly: consider our lock lost when not renewed for this long
    suspend_orderly_s: float = 1.0
    # None: Java's default by mode (CONCURRENT_/ORDERLY_MAX_RECONSUME_TIMES); read reconsume_limit
    max_reconsume_times: int | None = None
    consume_timeout_s: float = 15 * 60.0
    send_back_retry_s: float = 5.0  # send-back and resend failed: consumed here again after this
    # Beyond Java, concurrent mode: a message the listener failed (RECONSUME_LATER, an exception, the
    # consume timeout) is never given up, whatever max_reconsume_times: it is consumed again here after
    # send_back_retry_s until it succeeds, held in its process queue so the offset cannot pass it, not
    # dropped (broadcasting) nor sent back to %RETRY% and from there to the DLQ (clustering). For a
    # listener whose failures are its own store's (a full disk can last hours) and whose messages must
    # not be lost; a listener that always fails on a message stalls its queue. DEAD_LETTER still gives up.
    retry_locally_forever: bool = False
    close_timeout_s: float = 10.0  # how long close() waits for messages being consumed
    offsets_dir: Path | None = None  # broadcasting: None for Java's ~/.rocketmq_offsets
    # Hand a queue's messages to the listener only below the acknowledged offset + this, persisting as
    # the committed offset moves (rmq.consumer.commit_window): a crash redelivers at most this many
    # per queue. 0: off, as Java (the duplicates are then what finished since the last 5 s persist).
    commit_window: int = 0
    # The most a compressed body may inflate to (message_codec.MAX_BODY_BYTES: 16 MiB, 4x Java's 4 MiB
    # maxMessageSize, which its producer checks before compressing). A body past it, or one that does not
    # inflate at all, is not delivered: it goes to the group's DLQ (push_consumer._set_aside).
    max_body_bytes: int = MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if not self.group:
            raise ValueError("a consumer needs a group")
        for name in (
            "consume_concurrency",
            "consume_batch_size",
            "pull_batch_size",
            "pull_threshold_for_queue",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be at least 1")
        if not self.consume_timeout_s > 0:  # 0 would make the sweep a busy loop failing every call
            raise ValueError("consume_timeout_s must be above 0")
        if self.commit_window < 0:
            raise ValueError("commit_window must not be negative")
        if not 0 < self.route_retry_s <= self.heartbeat_interval_s:
            raise ValueError("route_retry_s must be above 0 and at most heartbeat_interval_s")
        if self.max_reconsume_times is not None and self.max_reconsume_times < 0:
            raise ValueError("max_reconsume_times must not be negative")
        if self.retry_locally_forever and self.orderly:
            raise ValueError("retry_locally_forever is for concurrent mode (orderly retries on its own)")

    @property
    def reconsume_limit(self) -> int:
        """The failures after which a message is given up (concurrent: the broker moves it to the DLQ;
        orderly: this client does): max_reconsume_times, or Java's default for the mode when unset."""
        if self.max_reconsume_times is not None:
            return self.max_reconsume_times
        return default_max_reconsume_times(self.orderly)
