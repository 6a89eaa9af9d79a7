"""Driving a group of sticky members to a settled state, shared by the devbroker and realbroker tests."""

from __future__ import annotations

from collections import Counter

from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageQueue
from tests.rmq.consumer.helpers import owned


def owners(members: list[PushConsumer], topic: str) -> dict[MessageQueue, list[str]]:
    out: dict[MessageQueue, list[str]] = {}
    for m in members:
        for mq in owned(m, topic):
            out.setdefault(mq, []).append(m.client_id)
    return out


def settled(members: list[PushConsumer], topic: str, queue_count: int) -> bool:
    table = owners(members, topic)
    sizes = [len(owned(m, topic)) for m in members]
    return (
        len(table) == queue_count
        and all(len(o) == 1 for o in table.values())
        and max(sizes) - min(sizes) <= 1
    )


async def settle_all(members: list[PushConsumer], topic: str, queue_count: int) -> None:
    """Rebalance every member in turn until no queue is shared or unowned and loads are balanced (the
    20 s timer would do the same; the tests drive it)."""
    for _ in range(6):
        if settled(members, topic, queue_count):
            return
        for m in members:
            await m.rebalance()
    raise AssertionError(f"no convergence: {Counter(len(o) for o in owners(members, topic).values())}")
