"""Batch sends (P8): messages grouped by topic and chosen queue, cut into chunks the broker accepts, each
chunk sent with SEND_BATCH_MESSAGE (and retried like a single send); one outcome per message."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rmq.broker import BrokerApi
from rmq.errors import RocketMQError, RouteNotFound, SendFailed
from rmq.message import Message, MessageQueue
from rmq.msgid import new_uniq_id
from rmq.producer.config import ProducerConfig
from rmq.producer.publish_info import AttemptFn, TopicPublishInfo
from rmq.producer.routes import TopicRoutes
from rmq.producer.selector import ByShardingKey, QueueSelector
from rmq.result import SendResult


class BatchHost(Protocol):
    """What batching needs of its producer (a protocol, so batch.py and producer.py do not import each
    other)."""

    config: ProducerConfig
    routes: TopicRoutes
    api: BrokerApi

    def selector_for(self, sharding_key: str | None) -> QueueSelector: ...

    async def with_retries(
        self, topic: str, selector: QueueSelector, attempt: AttemptFn, what: str
    ) -> SendResult: ...


Outcome = SendResult | RocketMQError
_RECORD_OVERHEAD = 22 + 64  # batch record header + the properties we add (UNIQ_KEY, WAIT, ...)


@dataclass(frozen=True, slots=True)
class _QueueAt:
    """Pins a chunk of keyed messages to the queue their keys hash to."""

    index: int
    ordered = True

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        return info.queues[self.index % len(info.queues)]


def _size(msg: Message) -> int:
    return (
        len(msg.body)
        + _RECORD_OVERHEAD
        + sum(len(k) + len(v) + 2 for k, v in msg.properties.items())
        + (len(msg.tags or "") + sum(len(k) + 1 for k in msg.keys))
    )


class BatchSender:
    def __init__(self, producer: BatchHost) -> None:
        self._producer = producer

    async def send(
        self, messages: Sequence[Message], sharding_keys: Sequence[str | None] | None, *, validated: bool
    ) -> list[Outcome]:
        keys: list[str | None] = list(sharding_keys) if sharding_keys is not None else [None] * len(messages)
        if len(keys) != len(messages):
            raise ValueError("sharding_keys must have one entry per message")
        outcomes: list[Outcome | None] = [None] * len(messages)
        ids: list[str] = []
        by_topic: dict[str, list[int]] = {}
        cfg = self._producer.config
        for i, msg in enumerate(messages):
            ids.append(msg.id or new_uniq_id())
            if not validated:
                try:
                    msg.validate(cfg.max_body_bytes)
                except RocketMQError as exc:
                    outcomes[i] = exc
                    continue
            by_topic.setdefault(msg.topic, []).append(i)
        jobs = [self._topic(topic, idx, messages, keys, ids, outcomes) for topic, idx in by_topic.items()]
        await asyncio.gather(*jobs)
        assert all(o is not None for o in outcomes)
        return outcomes  # type: ignore[return-value]

    async def _topic(
        self,
        topic: str,
        indexes: list[int],
        messages: Sequence[Message],
        keys: list[str | None],
        ids: list[str],
        outcomes: list[Outcome | None],
    ) -> None:
        producer = self._producer
        try:
            info = await producer.routes.get(topic)
            groups: dict[int | None, list[int]] = {}
            for i in indexes:
                key = keys[i]
                if key is not None and not info.queues:
                    raise RouteNotFound(f"topic {topic!r} has no writable queue")
                slot = None if key is None else ByShardingKey(key).index(len(info.queues))
                groups.setdefault(slot, []).append(i)
        except RocketMQError as exc:
            failed = SendFailed(f"batch to {topic}: no route: {exc}", [], exc)
            for i in indexes:
                outcomes[i] = failed
            return
        chunks = [
            (slot, chunk) for slot, members in groups.items() for chunk in self._chunks(members, messages)
        ]
        await asyncio.gather(
            *(self._chunk(topic, slot, chunk, messages, ids, outcomes) for slot, chunk in chunks)
        )

    def _chunks(self, members: list[int], messages: Sequence[Message]) -> list[list[int]]:
        cfg = self._producer.config
        out: list[list[int]] = [[]]
        size = 0
        for i in members:
            s = _size(messages[i])
            if out[-1] and (size + s > cfg.max_batch_bytes or len(out[-1]) >= cfg.max_batch_messages):
                out.append([])
                size = 0
            out[-1].append(i)
            size += s
        return out

    async def _chunk(
        self,
        topic: str,
        slot: int | None,
        chunk: list[int],
        messages: Sequence[Message],
        ids: list[str],
        outcomes: list[Outcome | None],
    ) -> None:
        producer = self._producer
        batch = [messages[i] for i in chunk]
        batch_ids = [ids[i] for i in chunk]
        selector: QueueSelector = producer.selector_for(None) if slot is None else _QueueAt(slot)

        async def attempt(
            mq: MessageQueue, addr: str, remaining: float, info: TopicPublishInfo
        ) -> SendResult:
            return await producer.api.send_batch(
                addr, mq, batch, batch_ids, remaining, producer.config.default_topic
            )

        try:
            result = await producer.with_retries(topic, selector, attempt, f"a batch of {len(chunk)}")
        except RocketMQError as exc:
            for i in chunk:
                outcomes[i] = exc
            return
        offset_ids = result.offset_msg_id.split(",")
        offset_ids += [""] * (len(chunk) - len(offset_ids))  # a broker that named fewer: empty ids
        # One SendResult per message of the chunk, positional (the hot loop of a batch): status, msg_id,
        # offset_msg_id, queue, queue_offset, region_id, trace_on, attempts.
        status, queue, first, region, trace, attempts = (
            result.status,
            result.queue,
            result.queue_offset,
            result.region_id,
            result.trace_on,
            result.attempts,
        )
        for n, i in enumerate(chunk):
            outcomes[i] = SendResult(status, ids[i], offset_ids[n], queue, first + n, region, trace, attempts)
