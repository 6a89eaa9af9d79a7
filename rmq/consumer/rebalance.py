"""The pure parts of a rebalance: which queues of a topic are ours, and where a new queue starts."""

from __future__ import annotations

from collections.abc import Sequence

from ..broker import BrokerApi
from ..clock import wall_ms
from ..message import RETRY_PREFIX, MessageQueue
from .allocate import AllocateStrategy, sort_for_allocation
from .config import ConsumeFrom, ConsumerConfig, MessageModel
from .offset_store import OffsetStore, ReadType

DEFAULT_TIMESTAMP_LOOKBACK_MS = 30 * 60 * 1000  # Java's consumeTimestamp default: half an hour ago


def allocate_queues(
    config: ConsumerConfig,
    client_id: str,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
    strategy: AllocateStrategy | None = None,
) -> set[MessageQueue]:
    """RebalanceImpl.rebalanceByTopic: every queue in broadcasting, else the strategy's (default: the
    configured one's) share of the queues and client ids, both sorted as Java sorts them."""
    if config.message_model is MessageModel.BROADCASTING:
        return set(mq_all)
    if not mq_all or not cid_all:
        return set()
    mqs, cids = sort_for_allocation(mq_all, cid_all)
    return set((strategy or config.allocate).allocate(config.group, client_id, mqs, cids))


def consume_timestamp(config: ConsumerConfig, built_ms: int) -> int:
    """The point a CONSUME_FROM_TIMESTAMP consumer built at ``built_ms`` searches: the configured one,
    else half an hour before it was built. Java's DefaultMQPushConsumer sets consumeTimestamp once, in
    its field initialiser, and every queue it ever adds searches that same point: taken per queue, a
    queue added hours after start (a topic subscribed then, queues added) skipped all but its last
    half hour."""
    if config.consume_timestamp_ms is not None:
        return config.consume_timestamp_ms
    return built_ms - DEFAULT_TIMESTAMP_LOOKBACK_MS


async def start_offset(
    config: ConsumerConfig,
    offsets: OffsetStore,
    api: BrokerApi,
    addr: str,
    mq: MessageQueue,
    timestamp_ms: int | None = None,
) -> int:
    """computePullFromWhere (4.9.4): the committed offset if there is one, else by ``consume_from``.
    A retry topic starts at its beginning (LAST_OFFSET) or end (TIMESTAMP) as Java does. TIMESTAMP
    searches ``timestamp_ms``, the consumer's consume_timestamp (fixed when it was built); without,
    consume_timestamp as of now (a caller that is no consumer). Errors raise, and the queue is left for
    the next rebalance."""
    committed = await offsets.read(mq, ReadType.STORE)
    if committed is not None and committed >= 0:
        return committed
    retry = mq.topic.startswith(RETRY_PREFIX)
    if config.consume_from is ConsumeFrom.FIRST_OFFSET:
        return 0
    if config.consume_from is ConsumeFrom.LAST_OFFSET:
        return 0 if retry else await api.get_max_offset(addr, mq)
    if retry:
        return await api.get_max_offset(addr, mq)
    if timestamp_ms is None:
        timestamp_ms = consume_timestamp(config, wall_ms())
    return await api.search_offset(addr, mq, timestamp_ms)
