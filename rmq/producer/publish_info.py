"""TopicPublishInfo: a topic's writable queues over all master brokers, and its round-robin index."""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..message import MessageQueue
from ..result import SendResult
from ..route import TopicRouteData


class SendIndex:
    """The per-topic send counter (P2). It survives route refreshes, like Java's sendWhichQueue, and
    starts at a random value so that many sidecars do not all begin on the same queue."""

    __slots__ = ("_counter", "next")

    def __init__(self, start: int | None = None) -> None:
        self._counter = itertools.count(random.randrange(1 << 16) if start is None else start)
        # The next index: the counter's own __next__, a C call (once a send), not a method calling it.
        self.next: Callable[[], int] = self._counter.__next__


@dataclass(slots=True)
class TopicPublishInfo:
    topic: str
    route: TopicRouteData
    queues: list[MessageQueue]
    index: SendIndex
    auto_create: bool = False  # the route is the default topic's: the broker creates the topic on send
    queues_by_broker: dict[str, list[MessageQueue]] = field(default_factory=dict)
    # Each broker's master address, as route.master_addr finds it (read once a send attempt).
    master_addrs: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def build(
        cls, topic: str, route: TopicRouteData, index: SendIndex, *, auto_create: bool = False
    ) -> TopicPublishInfo:
        queues = route.publish_queues(topic)
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in queues:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        addrs: dict[str, str | None] = {}
        for b in route.broker_datas:
            addrs.setdefault(b.broker_name, b.master_addr)  # the first of a name, as route.broker finds
        return cls(topic, route, queues, index, auto_create, by_broker, addrs)

    @property
    def ok(self) -> bool:
        return bool(self.queues)

    @property
    def ordered(self) -> bool:
        return self.route.is_ordered

    def brokers(self) -> list[str]:
        return list(self.queues_by_broker)

    def master_addr(self, broker: str) -> str | None:
        return self.master_addrs.get(broker)

    def next_queue(self) -> MessageQueue:
        """Plain round robin over all writable queues (selectOneMessageQueue())."""
        return self.queues[self.index.next() % len(self.queues)]

    def queue_on(self, broker: str) -> MessageQueue:
        """A queue of ``broker``, rotating with the send index (used after pickOneAtLeast)."""
        own = self.queues_by_broker[broker]
        return own[self.index.next() % len(own)]


# One attempt of a send: (queue, broker address, remaining budget in s, publish info) -> result.
AttemptFn = Callable[[MessageQueue, str, float, TopicPublishInfo], Awaitable[SendResult]]
