"""The pure parts of a rebalance: which queues of a topic are ours, and where a new queue starts."""

from __future__ import annotations

from collections.abc import Sequence

from ..broker import BrokerApi
from ..clock import wall_ms
from ..message import MessageQueue
from .allocate import AllocateStrategy, sort_for_allocation
from .config import RETRY_PREFIX, ConsumeFrom, ConsumerConfig, MessageModel
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


async def start_offset(
    config: ConsumerConfig, offsets: OffsetStore, api: BrokerApi, addr: str, mq: MessageQueue
) -> int:
    """computePullFromWhere (4.9.4): the committed offset if there is one, else by ``consume_from``.
    A retry topic starts at its beginning (LAST_OFFSET) or end (TIMESTAMP) as Java does. Errors raise,
    and the queue is left for the next rebalance."""
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
    ts = config.consume_timestamp_ms
    if ts is None:
        ts = wall_ms() - DEFAULT_TIMESTAMP_LOOKBACK_MS
    return await api.search_offset(addr, mq, ts)
