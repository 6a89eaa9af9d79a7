"""The concurrent service's worker pool and its consume-timeout sweep (no task per listener call, no
timer per call), driven with an injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocksidecar.rmq.consumer.config import ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.consume_concurrently import ConcurrentService
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.queue_state import QueueState
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.factory import stored
from tests.rmq.consumer.test_push_lifecycle import FakeHost


class Gate:
    """A listener that holds every call until released; counts the calls inside it."""

    def __init__(self, hang_first: int = 0) -> None:
        self.inside = 0
        self.most_inside = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.hang_first = hang_first  # these first calls never return by themselves
        self.calls = 0
        self.done: list[int] = []

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        self.calls += 1
        call = self.calls
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.entered.set()
        try:
            if call <= self.hang_first:
                await asyncio.Event().wait()  # stuck until the sweep fails it
            await self.release.wait()
        finally:
            self.inside -= 1
        self.done.extend(m.queue_offset for m in msgs)
        return ConsumeStatus.SUCCESS


def _queue(n: int) -> QueueState:
    state = QueueState(MessageQueue("T", "b", 0), ProcessQueue(0))
    state.pq.put([stored(i) for i in range(n)], n)
    return state


async def test_the_pool_bounds_concurrency_with_a_fixed_set_of_tasks() -> None:
    gate = Gate()
    host = FakeHost(gate)  # type: ignore[arg-type]
    host.config = ConsumerConfig("G", consume_concurrency=3)
    service = ConcurrentService(host)  # type: ignore[arg-type]
    state = _queue(200)
    service.submit(state, state.pq.messages()[:1])
    await gate.entered.wait()
    tasks_with_the_pool = len(asyncio.all_tasks())
    service.submit(state, state.pq.messages()[1:])
    for _ in range(20):  # let the workers take what they can
        await asyncio.sleep(0)
    assert gate.inside == 3  # consume_concurrency calls at once, the rest queued
    assert len(asyncio.all_tasks()) == tasks_with_the_pool  # no task per message
    gate.release.set()
    await service.drain(5.0)
    await service.stop()
    assert sorted(gate.done) == list(range(200))
    assert gate.most_inside == 3
    assert host.updates[-1] == (state.mq, 200)  # every message finished: the offset moved past all


async def test_the_sweep_fails_a_call_past_the_consume_timeout_and_the_worker_goes_on() -> None:
    now = [100.0]
    gate = Gate(hang_first=1)
    host = FakeHost(gate)  # type: ignore[arg-type]
    host.config = ConsumerConfig("G", consume_concurrency=1, consume_timeout_s=60.0)
    service = ConcurrentService(host, clock=lambda: now[0])  # type: ignore[arg-type]
    state = _queue(2)
    sent_back: list[int] = []

    async def send_back(msg: MessageExt, mq: MessageQueue, *, dead: bool = False) -> bool:
        sent_back.append(msg.queue_offset)
        return True

    host.send_back = send_back  # type: ignore[method-assign]
    service.submit(state, state.pq.messages())
    await gate.entered.wait()
    assert service.sweep() == 0  # the first sweep to see the call notes when (now: 100)
    now[0] = 159.0
    assert service.sweep() == 0  # not yet due
    now[0] = 160.0
    assert service.sweep() == 1
    gate.release.set()
    await service.drain(5.0)
    assert sent_back == [0]  # the stuck message went back to the broker as a failure
    assert gate.done == [1]  # the one worker was freed and consumed the next message
    assert host.stats["consume_failed"] == 1
    assert host.updates[-1] == (state.mq, 2)
    assert service.sweep() == 0  # nothing running: nothing to fail
    await service.stop()


async def test_cancelling_the_worker_itself_is_not_mistaken_for_a_timeout() -> None:
    gate = Gate()
    host = FakeHost(gate)  # type: ignore[arg-type]
    service = ConcurrentService(host)  # type: ignore[arg-type]
    state = _queue(1)
    service.submit(state, state.pq.messages())
    await gate.entered.wait()
    await service.stop()  # close: the workers end, the message stays unacknowledged
    assert host.updates == []
    assert host.stats["consume_failed"] == 0


async def test_per_message_statuses_send_back_only_the_failed_and_dead_letter_the_dropped() -> None:
    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> list[ConsumeStatus]:
        return [ConsumeStatus.SUCCESS, ConsumeStatus.RECONSUME_LATER, ConsumeStatus.DEAD_LETTER]

    host = FakeHost(listener)  # type: ignore[arg-type]
    host.config = ConsumerConfig("G", consume_batch_size=3)
    sent_back: list[tuple[int, bool]] = []

    async def send_back(msg: MessageExt, mq: MessageQueue, *, dead: bool = False) -> bool:
        sent_back.append((msg.queue_offset, dead))
        return True

    host.send_back = send_back  # type: ignore[method-assign]
    service = ConcurrentService(host)  # type: ignore[arg-type]
    state = _queue(3)
    service.submit(state, state.pq.messages())
    await service.drain(5.0)
    await service.stop()
    assert sent_back == [(1, False), (2, True)]  # the retry topic for one, the DLQ for the other
    assert (host.stats["consume_ok"], host.stats["consume_failed"], host.stats["dead_lettered"]) == (1, 2, 1)
    assert host.updates[-1] == (state.mq, 3)


async def test_a_status_list_of_the_wrong_length_fails_the_whole_batch() -> None:
    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> list[ConsumeStatus]:
        return [ConsumeStatus.SUCCESS]  # one answer for three messages: a bug of the listener

    host = FakeHost(listener)  # type: ignore[arg-type]
    host.config = ConsumerConfig("G", consume_batch_size=3)
    service = ConcurrentService(host)  # type: ignore[arg-type]
    state = _queue(3)
    service.submit(state, state.pq.messages())
    await service.drain(5.0)
    await service.stop()
    assert host.stats["consume_failed"] == 3  # all sent back (FakeHost's send_back succeeds)
