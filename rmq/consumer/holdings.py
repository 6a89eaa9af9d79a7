"""What the other members of a group own now, read through the broker (the sticky allocation's input).

Each member is asked for its ConsumerRunningInfo with GET_CONSUMER_RUNNING_INFO, which the broker
forwards over the member's own connection; all at once, each within a bounded time. A member that does
not answer (gone, busy, or not a consumer that answers 307) counts as owning nothing: its queues are then
dealt out as orphans, and the next rebalance corrects any overlap once it answers again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence, Set

from rmq.broker import BrokerApi
from rmq.consumer.running_info import owned_queues
from rmq.errors import RocketMQError
from rmq.message import MessageQueue

log = logging.getLogger(__name__)


async def read_holdings(
    api: BrokerApi,
    addr: str,
    group: str,
    topic: str,
    cids: Sequence[str],
    me: str,
    mine: Set[MessageQueue],
    timeout_s: float,
) -> dict[str, set[MessageQueue]]:
    """Every member's queues of ``topic``: ours from ``mine``, the others' as they report them."""

    async def one(cid: str) -> set[MessageQueue]:
        try:
            body = await api.get_consumer_running_info(addr, group, cid, timeout_s)
            return owned_queues(body, topic)
        except RocketMQError as exc:
            log.info("group %s: no holdings from %s (%s); it counts as owning nothing", group, cid, exc)
            return set()

    others = [c for c in dict.fromkeys(cids) if c != me]
    answers = await asyncio.gather(*(one(c) for c in others))
    held = dict(zip(others, answers, strict=True))
    held[me] = {mq for mq in mine if mq.topic == topic}
    return held
