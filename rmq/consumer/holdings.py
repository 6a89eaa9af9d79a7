"""What the other members of a group own now, read through the broker (the sticky allocation's input).

Each member is asked for its ConsumerRunningInfo with GET_CONSUMER_RUNNING_INFO, which the broker
forwards over the member's own connection; all at once, each within a bounded time. A member the broker
calls not online, or whose client no longer has the group (it is leaving), owns nothing. When a member
does not answer (busy, or a broker that does not forward 307) the holdings are unknown (None) and the caller
falls back to the stateless assignment (BoundedHash), which every member computes alike. Counting the
silent member as owning nothing instead would hand its queues to others while it still consumes them,
and if it never answers that overlap would last: tests/rmq/consumer/test_sticky_devbroker.py shows it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence, Set

from ..broker import BrokerApi
from ..errors import BrokerSystemError, RocketMQError
from ..message import MessageQueue
from .running_info import owned_queues

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
) -> dict[str, set[MessageQueue]] | None:
    """Every member's queues of ``topic``: ours from ``mine``, the others' as they report them; None
    when any member did not answer."""

    async def one(cid: str) -> set[MessageQueue] | None:
        try:
            body = await api.get_consumer_running_info(addr, group, cid, timeout_s)
            return owned_queues(body, topic)
        except BrokerSystemError as exc:
            # "not online" at the broker or "group not exist" at the client: it consumes nothing now
            # (it is leaving, or not registered yet), so it owns nothing.
            log.info("group %s: %s holds nothing: %s", group, cid, exc)
            return set()
        except RocketMQError as exc:
            log.info("group %s: no holdings from %s (%s); stateless allocation this time", group, cid, exc)
            return None

    others = [c for c in dict.fromkeys(cids) if c != me]
    answers = await asyncio.gather(*(one(c) for c in others))
    held: dict[str, set[MessageQueue]] = {}
    for cid, answer in zip(others, answers, strict=True):
        if answer is None:
            return None
        held[cid] = answer
    held[me] = {mq for mq in mine if mq.topic == topic}
    return held
