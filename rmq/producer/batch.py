"""Batch sends (P8): messages grouped by topic and chosen queue, cut into chunks the broker accepts, each
chunk sent with SEND_BATCH_MESSAGE (and retried like a single send); one outcome per message."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Protocol, cast

from ..broker import BrokerApi
from ..errors import InvalidMessageError, RocketMQError, RouteNotFound, SendFailed
from ..message import PROPERTIES_MAX_BYTES, Message, MessageQueue, wire_properties_of
from ..msgid import new_uniq_id
from ..result import SendResult
from ..sender import BatchResults, Outcome, ShardingKeys
from .config import ProducerConfig
from .publish_info import AttemptFn, TopicPublishInfo
from .routes import TopicRoutes
from .selector import ByShardingKey, QueueSelector


class BatchHost(Protocol):
    """What batching needs of its producer (a protocol, so batch.py and producer.py do not import each
    other)."""

    config: ProducerConfig
    routes: TopicRoutes
    api: BrokerApi

    def selector_for(self, sharding_key: str | None) -> QueueSelector: ...

    def send_deadline(self) -> float: ...

    async def publish_info(self, topic: str, deadline: float) -> TopicPublishInfo: ...

    async def with_retries(
        self,
        topic: str,
        selector: QueueSelector,
        attempt: AttemptFn,
        what: str,
        message: Message | None,
        deadline: float | None,
    ) -> SendResult: ...


# A batch's fields are read by comprehensions, not map(attrgetter(...)): on 3.11 an attribute read in a
# comprehension is specialised for the Struct's slot, about half of attrgetter's cost a message (issue 32).
# A record's header (20) and its properties' length (2), and room for a property string whose non-ASCII
# characters take more bytes than the characters counted.
_RECORD_OVERHEAD = 22 + 64
# A property string of at most this many characters is at most PROPERTIES_MAX_BYTES in UTF-8 (4 bytes a
# character at most): only longer ones are measured.
_SHORT_PROPERTIES_CHARS = PROPERTIES_MAX_BYTES // 4
# The messages of a chunk the broker refused as a whole, sent again one by one: at most this many of them
# in flight at once (per refused chunk). All at once was up to a chunk's size (hundreds) of concurrent
# requests to one broker from one call, at the moment it is refusing; a few keep most of the speed of
# sending them together without the burst.
FALLBACK_IN_FLIGHT = 8


@dataclass(frozen=True, slots=True)
class _QueueAt:
    """Pins a chunk of keyed messages to the queue their keys hash to."""

    index: int
    ordered = True

    def select(self, info: TopicPublishInfo, last_broker: str | None) -> MessageQueue:
        return info.queues[self.index % len(info.queues)]


class BatchSender:
    def __init__(self, producer: BatchHost) -> None:
        self._producer = producer

    async def send(
        self, messages: Sequence[Message], sharding_keys: ShardingKeys, *, validated: bool
    ) -> BatchResults:
        n = len(messages)
        keys: list[str | None] = list(sharding_keys) if sharding_keys is not None else [None] * n
        if len(keys) != n:
            raise ValueError("sharding_keys must have one entry per message")
        outcomes: list[Outcome | None] = [None] * n
        given = [m.id for m in messages]
        # the producer names those that have no id (None or "")
        ids = cast(list[str], given) if all(given) else [id or new_uniq_id() for id in given]
        # Each message's property string, built once: it sizes the chunks and is what goes on the wire.
        wires = wire_properties_of(messages, ids)
        batch = _Batch(messages, ids, wires, outcomes, keys.count(None) == n)
        # One budget for the whole batch: its route lookups, its chunks and their retries, and the
        # messages of a refused chunk sent again one by one (a budget each made a batch of n take n + 1).
        deadline = self._producer.send_deadline()
        unfit = _unfit_properties(wires) if n and max(map(len, wires)) > _SHORT_PROPERTIES_CHARS else {}
        for i, exc in unfit.items():
            outcomes[i] = exc
        by_topic = None
        if validated and not unfit:
            topics = {m.topic for m in messages}
            if len(topics) == 1:  # the usual batch, one topic: every index, in order, without a loop of ours
                by_topic = {topics.pop(): list(range(n))}
        if by_topic is None:
            by_topic = self._by_topic(messages, outcomes, validated)
        await _all([self._topic(topic, idx, keys, batch, deadline) for topic, idx in by_topic.items()])
        assert None not in outcomes  # (C compares, no generator a message)
        return outcomes  # type: ignore[return-value]

    def _by_topic(
        self, messages: Sequence[Message], outcomes: list[Outcome | None], validated: bool
    ) -> dict[str, list[int]]:
        """Each topic's indexes, in order; a message that fails validation (or has its outcome already)
        gets its outcome instead."""
        by_topic: dict[str, list[int]] = {}
        cfg = self._producer.config
        for i, msg in enumerate(messages):
            if outcomes[i] is not None:
                continue
            if not validated:
                try:
                    msg.validate(cfg.max_body_bytes)
                except RocketMQError as exc:
                    outcomes[i] = exc
                    continue
            by_topic.setdefault(msg.topic, []).append(i)
        return by_topic

    async def _topic(
        self, topic: str, indexes: list[int], keys: list[str | None], batch: _Batch, deadline: float
    ) -> None:
        producer = self._producer
        try:
            info = await producer.publish_info(topic, deadline)  # as a single send: within the budget
            # No sharding key in the batch: one group, the selector's choice.
            groups = {None: indexes} if batch.unkeyed else _by_slot(topic, indexes, keys, info)
        except RocketMQError as exc:
            failed = SendFailed(f"batch to {topic}: no route: {exc}", [], exc)
            for i in indexes:
                batch.outcomes[i] = failed
            return
        jobs: list[Coroutine[Any, Any, None]] = []
        for slot, members in groups.items():
            chunks = self._chunks(members, batch)
            if slot is None or len(chunks) == 1:  # unkeyed (no order promised), or one chunk (the usual)
                jobs += [self._chunk(topic, slot, chunk, batch, deadline) for chunk in chunks]
            else:  # a sharding key's queue: its chunks in their order
                jobs.append(self._in_order(topic, slot, chunks, batch, deadline))
        await _all(jobs)

    async def _in_order(
        self, topic: str, slot: int, chunks: list[list[int]], batch: _Batch, deadline: float
    ) -> None:
        """The chunks of one sharding key's slot, one after another: sent together, a busy or timed-out
        answer to one let a later one be stored ahead of it. Once a chunk fails (so it is spooled), the
        later ones are not sent: they fail too and are spooled behind it, not stored ahead of it. A final
        failure (the message refused for good, never stored) holds nothing back."""
        outcomes = batch.outcomes
        for n, chunk in enumerate(chunks):
            await self._chunk(topic, slot, chunk, batch, deadline)
            failed = next(
                (o for i in chunk if isinstance(o := outcomes[i], RocketMQError) and not o.final), None
            )
            if failed is not None:
                held = SendFailed(
                    f"batch to {topic}: not sent, behind a failed one of its key: {failed}", [], failed
                )
                for later in chunks[n + 1 :]:
                    for i in later:
                        outcomes[i] = held
                return

    def _chunks(self, members: list[int], batch: _Batch) -> list[list[int]]:
        cfg = self._producer.config
        messages, wires = batch.messages, batch.wires
        if len(members) == len(wires) and len(members) <= cfg.max_batch_messages:
            # The whole batch (every index, in order): one chunk when all of it fits, which the cut
            # below would find message by message.
            size = sum(map(len, wires)) + sum([len(m.body) for m in messages]) + _RECORD_OVERHEAD * len(wires)
            if size <= cfg.max_batch_bytes:
                return [members]
        out: list[list[int]] = [[]]
        size = 0
        for i in members:
            s = len(messages[i].body) + len(wires[i]) + _RECORD_OVERHEAD
            if out[-1] and (size + s > cfg.max_batch_bytes or len(out[-1]) >= cfg.max_batch_messages):
                out.append([])
                size = 0
            out[-1].append(i)
            size += s
        return out

    async def _chunk(
        self, topic: str, slot: int | None, chunk: list[int], batch: _Batch, deadline: float
    ) -> None:
        producer = self._producer
        ids, outcomes = batch.ids, batch.outcomes
        messages: Sequence[Message]
        if len(chunk) == len(ids):  # the whole batch, in order: its own lists
            messages, chunk_ids, wires = batch.messages, ids, batch.wires
        else:
            messages = [batch.messages[i] for i in chunk]
            chunk_ids = [ids[i] for i in chunk]
            wires = [batch.wires[i] for i in chunk]
        selector: QueueSelector = producer.selector_for(None) if slot is None else _QueueAt(slot)

        async def attempt(
            mq: MessageQueue, addr: str, remaining: float, info: TopicPublishInfo
        ) -> SendResult:
            return await producer.api.send_batch(
                addr, mq, messages, chunk_ids, remaining, producer.config.default_topic, wires
            )

        try:
            result = await producer.with_retries(
                topic, selector, attempt, f"a batch of {len(chunk)}", messages[0], deadline
            )
        except RocketMQError as exc:
            if exc.final and len(chunk) > 1:
                # MESSAGE_ILLEGAL: the broker refuses a whole batch for one message's sake (its properties
                # with the broker's own items, its body): each alone, so only that one fails, within what
                # is left of the batch's budget (one that runs out fails SendFailed: spooled, not lost).
                # Keyed messages (a slot) one after another, in their order; unkeyed ones together,
                # FALLBACK_IN_FLIGHT at a time: each sender takes the next message as its last one ends.
                if slot is None:
                    pending = iter(chunk)

                    async def sender() -> None:
                        for i in pending:  # shared: each message goes to one sender
                            await self._chunk(topic, None, [i], batch, deadline)

                    await _all([sender() for _ in range(min(FALLBACK_IN_FLIGHT, len(chunk)))])
                else:  # one after another, and held behind one that fails, as a key's chunks
                    await self._in_order(topic, slot, [[i] for i in chunk], batch, deadline)
                return
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
        if len(chunk) == len(ids):  # the whole batch: its outcomes built in C, a column each (issue 32)
            outcomes[:] = map(
                SendResult,
                repeat(status),
                ids,
                offset_ids,
                repeat(queue),
                range(first, first + len(ids)),
                repeat(region),
                repeat(trace),
                repeat(attempts),
            )
            return
        for n, i in enumerate(chunk):
            outcomes[i] = SendResult(status, ids[i], offset_ids[n], queue, first + n, region, trace, attempts)


def _unfit_properties(wires: Sequence[str]) -> dict[int, InvalidMessageError]:
    """The messages whose property string is longer than a batch record's 2-byte length holds (Java's
    short, as in the broker's stored message): each fails alone, before the batch is encoded."""
    out: dict[int, InvalidMessageError] = {}
    for i, wire in enumerate(wires):
        if len(wire) > _SHORT_PROPERTIES_CHARS and (size := len(wire.encode())) > PROPERTIES_MAX_BYTES:
            out[i] = InvalidMessageError(
                f"properties are {size} bytes; a message holds at most {PROPERTIES_MAX_BYTES}",
                field="properties",
            )
    return out


def _by_slot(
    topic: str, indexes: list[int], keys: list[str | None], info: TopicPublishInfo
) -> dict[int | None, list[int]]:
    """The indexes by the queue their sharding key hashes to (None: no key, the selector's choice)."""
    groups: dict[int | None, list[int]] = {}
    for i in indexes:
        key = keys[i]
        if key is not None and not info.queues:
            raise RouteNotFound(f"topic {topic!r} has no writable queue")
        slot = None if key is None else ByShardingKey(key).index(len(info.queues))
        groups.setdefault(slot, []).append(i)
    return groups


@dataclass(frozen=True, slots=True)
class _Batch:
    """One send_batch call: its messages, their ids and property strings, and the outcomes so far."""

    messages: Sequence[Message]
    ids: list[str]
    wires: list[str]
    outcomes: list[Outcome | None]
    unkeyed: bool  # no message has a sharding key


async def _all(jobs: list[Coroutine[Any, Any, None]]) -> None:
    """Run the jobs concurrently; one (the usual case) without a task of its own."""
    if len(jobs) == 1:
        await jobs[0]
    else:
        await asyncio.gather(*jobs)
