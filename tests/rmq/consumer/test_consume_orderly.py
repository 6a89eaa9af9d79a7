"""QueueLocks, the orderly service's per-queue lock (Java's MessageQueueLock): one holder at a time per
message queue, a bounded wait for it, and no entry left once nothing holds or waits for it."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.rmq.consumer.consume_orderly import QueueLocks
from rocksidecar.rmq.message import MessageQueue

A = MessageQueue("T", "broker-a", 0)
B = MessageQueue("T", "broker-a", 1)


async def test_one_holder_per_queue_and_other_queues_go_on() -> None:
    locks = QueueLocks()
    order: list[str] = []
    waiter_in = asyncio.Event()

    async def second() -> None:
        waiter_in.set()
        async with locks.hold(A):
            order.append("second")

    async with locks.hold(A):
        task = asyncio.create_task(second())
        await waiter_in.wait()
        async with locks.hold(B):  # another queue is not held up
            order.append("other queue")
            assert len(locks) == 2  # A (held, one waiting) and B (held)
        assert len(locks) == 1  # B freed
        order.append("first")
    await task
    assert order == ["other queue", "first", "second"]
    assert len(locks) == 0


async def test_a_bounded_wait_gives_up_and_leaves_no_entry() -> None:
    locks = QueueLocks()
    async with locks.hold(A):
        with pytest.raises(TimeoutError):
            async with locks.hold(A, 0.01):
                raise AssertionError("the lock is held")
        assert len(locks) == 1  # only the holder's
    assert len(locks) == 0
    async with locks.hold(A, 0.01):  # free again at once
        pass
    assert len(locks) == 0
