"""Queue selectors (P2, P4, P7). ``ordered`` selectors pin a message to one queue: they skip the fault
tolerance's reordering, and a failed send is retried on the same queue instead of moving."""

from __future__ import annotations

import random
from enum import StrEnum
from typing import Protocol

from ..broker import java_string_hash
from ..errors import ClientError, RouteNotFound
from ..message import MessageQueue
from .fault import LatencyFaultTolerance
from .publish_info import TopicPublishInfo


class SelectorName(StrEnum):
    """The queue selectors a producer can be configured with (for messages without a sharding key)."""

    ROUND_ROBIN = "round_robin"
    RANDOM = "random"
    ENVIRONMENT = "environment"
    ZONE = "zone"


class QueueSelector(Protocol):
    ordered: bool

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue: ...


def _require_queues(info: TopicPublishInfo) -> None:
    if not info.queues:
        raise RouteNotFound(f"topic {info.topic!r} has no writable queue on any master broker")


def _least_bad(info: TopicPublishInfo, fault: LatencyFaultTolerance, last_broker: str | None) -> MessageQueue:
    """Every candidate backs off: take pickOneAtLeast's choice, avoiding the broker that just failed."""
    brokers = [b for b in info.brokers() if b != last_broker] or info.brokers()
    broker = fault.pick_one_at_least(brokers)
    assert broker is not None
    return info.queue_on(broker)


def _scan(
    info: TopicPublishInfo,
    queues: list[MessageQueue],
    fault: LatencyFaultTolerance | None,
    last_broker: str | None,
    start: int | None = None,
) -> MessageQueue | None:
    """Round robin from the topic's send index (or ``start``, a value already taken from it) to the first
    queue on an available broker other than the one that just failed."""
    n = len(queues)
    if start is None:
        start = info.index.next()
    for i in range(n):
        mq = queues[(start + i) % n]
        if mq.broker_name != last_broker and (fault is None or fault.is_available(mq.broker_name)):
            return mq
    return None


class RoundRobin:
    """The default: round robin with latency fault tolerance (when ``fault`` is given)."""

    ordered = False

    def __init__(self, fault: LatencyFaultTolerance | None) -> None:
        self.fault = fault

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        queues = info.queues
        if not queues:
            _require_queues(info)
        # _scan's first step, without its call: the queue at the send index, when its broker is usable
        # (nearly every send).
        fault = self.fault
        start = info.index.next()
        first = queues[start % len(queues)]
        name = first.broker_name
        if name != last_broker and (fault is None or fault.is_available(name)):
            return first
        mq = _scan(info, queues, fault, last_broker, start)
        if mq is not None:
            return mq
        if self.fault is None:  # only the failed broker has queues
            return info.next_queue()
        return _least_bad(info, self.fault, last_broker)


class RandomQueue:
    ordered = False

    def __init__(self, fault: LatencyFaultTolerance | None, rng: random.Random | None = None) -> None:
        self.fault = fault
        self._rng = rng or random.Random()

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        _require_queues(info)
        fault = self.fault
        ok = [
            q
            for q in info.queues
            if q.broker_name != last_broker and (fault is None or fault.is_available(q.broker_name))
        ]
        if ok:
            return self._rng.choice(ok)
        if fault is None:
            return self._rng.choice(info.queues)
        return _least_bad(info, fault, last_broker)


class PreferZone:
    """Brokers whose names contain the zone tag first (machine-room nearby); others when none is usable."""

    ordered = False

    def __init__(self, zone: str, fault: LatencyFaultTolerance | None) -> None:
        if not zone:
            raise ClientError("a zone selector needs a zone tag")
        self.zone = zone
        self.fault = fault

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        _require_queues(info)
        near = [q for q in info.queues if self.zone in q.broker_name]
        for group in (near, info.queues):
            mq = _scan(info, group, self.fault, last_broker) if group else None
            if mq is not None:
                return mq
        if self.fault is None:
            return (near or info.queues)[info.index.next() % len(near or info.queues)]
        return _least_bad(info, self.fault, last_broker)


class ByShardingKey:
    """Java's SelectMessageQueueByHash over the key's String.hashCode: the same key reaches the same
    queue while the route is unchanged, and matches what a Java producer would choose."""

    ordered = True
    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def index(self, queue_count: int) -> int:
        return abs(java_string_hash(self.key)) % queue_count

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        _require_queues(info)
        return info.queues[self.index(len(info.queues))]


class EnvironmentQueue:
    """Environment isolation: environment N always uses queue N-1, so dev/test environments can share a
    topic without taking each other's messages (seed 002)."""

    ordered = True

    def __init__(self, index: int) -> None:
        if index < 1:
            raise ClientError(f"environment index must be >= 1, got {index}")
        self.index = index

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        _require_queues(info)
        if self.index > len(info.queues):
            raise ClientError(
                f"environment {self.index} needs queue {self.index - 1}, but topic "
                f"{info.topic!r} has only {len(info.queues)} writable queues"
            )
        return info.queues[self.index - 1]


def make_selector(
    name: str,
    fault: LatencyFaultTolerance | None,
    rng: random.Random | None = None,
    environment_index: int = 0,
    zone: str = "",
) -> QueueSelector:
    """The producer's default selector by its configured name (ClientError for an unknown one)."""
    if name == SelectorName.ROUND_ROBIN:
        return RoundRobin(fault)
    if name == SelectorName.RANDOM:
        return RandomQueue(fault, rng)
    if name == SelectorName.ENVIRONMENT:
        return EnvironmentQueue(environment_index)
    if name == SelectorName.ZONE:
        return PreferZone(zone, fault)
    raise ClientError(f"unknown queue selector {name!r}")
