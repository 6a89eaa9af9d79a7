"""Edges of concurrent consumption, against Java 4.9.4's ConsumeMessageConcurrentlyService and ProcessQueue:
a worker's cancellation (the sweep's, stop()'s, a listener's own CancelledError), a message consumed here
again after a failed send-back (the process queue still knows it for its own), bad consume timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest

from rocksidecar.app.http_client import Answer, HttpClient
from rocksidecar.app.subscriptions.log import DeliveryLog
from rocksidecar.app.subscriptions.push import HttpPush
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.rmq.consumer.config import ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.consume_concurrently import ConcurrentService
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.queue_state import QueueState
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.factory import stored
from tests.rmq.consumer.test_push_lifecycle import FakeHost

BOUND_S = 2.0  # a generous bound on "returns"; only reached when the defect is there


def _queue(n: int) -> QueueState:
    state = QueueState(MessageQueue("T", "b", 0), ProcessQueue(0))
    state.pq.put([stored(i) for i in range(n)], n)
    return state


class Host(FakeHost):
    """FakeHost with a real closing flag (wait_closing as the consumer's) and a scripted send-back."""

    def __init__(self, listener: Any, send_back_ok: Sequence[bool] = ()) -> None:
        super().__init__(listener)
        self._closing = asyncio.Event()
        self.send_back_ok = list(send_back_ok)
        self.sent_back: list[tuple[int, int]] = []  # (offset, reconsume_times) of every send-back asked

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    @closing.setter
    def closing(self, value: bool) -> None:  # FakeHost.__init__ sets it
        pass

    async def wait_closing(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self._closing.wait()
        except TimeoutError:
            pass
        return self._closing.is_set()

    async def send_back(self, msg: MessageExt, mq: MessageQueue, *, dead: bool = False) -> bool:
        self.sent_back.append((msg.queue_offset, msg.reconsume_times))
        return self.send_back_ok.pop(0) if self.send_back_ok else True


async def test_a_stop_during_an_expired_calls_cleanup_is_not_swallowed_as_the_timeout() -> None:
    """The sweep failed a call past consume_timeout_s (it cancelled the worker, ``expired``). The listener's
    own clean-up on that cancellation awaits (an HTTP client closing its connection, say). close() then
    stops the pool: stop() cancels the worker again, and that CancelledError comes out of the listener
    while ``expired`` is still set, so ``_call`` takes it for the sweep's, uncancels once and carries on:
    the worker loops back to its queue and waits there for ever. Expected: stop() returns (the worker ends).
    Actual: stop() never returns, so PushConsumer.close() hangs after it unregistered; the sidecar's
    SIGTERM stop hangs until it is killed (what was to be closed after the consumers is not)."""
    now = [100.0]
    in_cleanup, cleaned = asyncio.Event(), asyncio.Event()

    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            in_cleanup.set()
            await cleaned.wait()  # clean-up that awaits
            raise
        return ConsumeStatus.SUCCESS

    entered = asyncio.Event()

    async def watched(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        entered.set()
        return await listener(msgs, mq)

    host = Host(watched)
    host.config = ConsumerConfig("G", consume_concurrency=1, consume_timeout_s=60.0)
    service = ConcurrentService(host, clock=lambda: now[0])  # type: ignore[arg-type]
    state = _queue(1)
    service.submit(state, state.pq.messages())
    await entered.wait()
    assert service.sweep() == 0  # seen at 100
    now[0] = 160.0
    assert service.sweep() == 1  # past the consume timeout: the call is cancelled
    await in_cleanup.wait()  # the listener is cleaning up after the sweep's cancel
    state.pq.drop()  # close(): the queues are dropped, then the pool stopped
    stopping = asyncio.ensure_future(service.stop())
    try:
        done, _ = await asyncio.wait([stopping], timeout=BOUND_S)
        assert stopping in done, "stop() did not return: the worker swallowed its cancellation"
    finally:
        stopping.cancel()
        for w in service._workers:
            if w.task is not None:
                w.task.cancel()
        await asyncio.gather(stopping, *(w.task for w in service._workers if w.task), return_exceptions=True)
        if service._sweeper is not None:
            service._sweeper.cancel()
            await asyncio.gather(service._sweeper, return_exceptions=True)


class App:
    """Stands in for HttpClient: answers POSTs from ``answers`` (the last one again when they run out)."""

    def __init__(self, answers: Sequence[Answer]) -> None:
        self.answers = list(answers)
        self.posts = 0
        self.waiting = asyncio.Event()

    async def post_lines(self, url: str, lines: bytes, body: bytes, timeout_s: float) -> Answer:
        self.posts += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        return await self.post_lines(url, b"", body, timeout_s)

    async def sleep(self, seconds: float) -> None:
        self.waiting.set()  # waiting out the Retry-After; only close() ends it here
        await asyncio.Event().wait()


async def test_close_during_a_503_wait_of_a_locally_retried_message_sends_nothing_back() -> None:
    """A message failed (the app answered 500) and its send-back failed (broker unreachable): as Java's
    submitConsumeRequestLater, it is consumed here again with reconsume_times + 1. Java bumps the count
    on the message itself; ``_consume`` makes a copy (dataclasses.replace), which is not the message the
    process queue caches. The app now answers 503 and the delivery waits out the Retry-After; SIGTERM
    comes. The listener's close path (ConsumerWired.withdrawn) asks ``acted_on(pq, msg)``, which looks the
    message up by identity (``pq.cached``): the copy is not found, so it answers RECONSUME_LATER instead
    of cancelling, and the consumer (not dropped yet while close() drains) sends the message back.
    Expected: nothing more sent back after the first, failed send-back (the restart delivers it again,
    as for a message on its first delivery). Actual: a second send-back on SIGTERM: a reconsume used and
    the message delayed on the retry topic (or to the DLQ at the last reconsume) for a "later" the app
    gave, and the DLQ log line for such a copy is never written either (same look-up)."""
    spec = SubscriptionSpec(
        name="s", topic="T", group="G", endpoint="http://127.0.0.1:9/in", consume_from="first"
    )
    app = App([Answer(500, {}), Answer(503, {"retry-after": "300"})])
    push = HttpPush(spec, cast(HttpClient, app), sleep=app.sleep)
    host = Host(push, send_back_ok=[False])
    host.config = ConsumerConfig("G", consume_concurrency=1, send_back_retry_s=0.0)
    state = _queue(1)
    push.process_queue = lambda mq: state.pq if mq == state.mq else None
    push.wait_closing = host.wait_closing
    service = ConcurrentService(host)  # type: ignore[arg-type]
    service.submit(state, state.pq.messages())
    try:
        async with asyncio.timeout(BOUND_S):
            await app.waiting.wait()  # 500, send-back failed, consumed again: 503, waiting it out
        assert app.posts == 2
        assert host.sent_back == [(0, 0)]
        host._closing.set()  # SIGTERM: close() drains before it drops the queues
        await service.drain(BOUND_S)
        for task in host.tasks:
            await asyncio.gather(task, return_exceptions=True)
        assert host.sent_back == [(0, 0)], f"sent back on close: {host.sent_back}"
        assert not state.pq.dropped and state.pq.count == 1  # held: the restart delivers it again
    finally:
        await service.stop()


async def test_a_listener_raising_cancelled_error_is_a_failure_not_the_end_of_a_worker() -> None:
    """Java's ConsumeRequest catches any Throwable from the listener: RECONSUME_LATER, sent back, the
    thread goes on. Here ``_call`` re-raises every CancelledError that is not the sweep's, so a listener
    that raises one without its worker being cancelled (it awaited a future some other party cancelled:
    a shared client closed under it, an inner task cancelled) ends the worker for good: the pool has one
    worker less, for ever, and the message is neither sent back nor consumed again; it stays in its
    process queue and holds the queue's committed offset. Expected: the message is sent back, the offset
    moves past both messages and the next message is consumed by the same (only) worker. Actual: nothing
    sent back, the second message is never consumed (consume_concurrency such calls stop the consumer)."""
    got: list[int] = []

    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        got.extend(m.queue_offset for m in msgs)
        if msgs[0].queue_offset == 0:
            cancelled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            cancelled.cancel()  # cancelled by someone else, not this worker's task
            await cancelled
        return ConsumeStatus.SUCCESS

    host = Host(listener)
    host.config = ConsumerConfig("G", consume_concurrency=1)
    service = ConcurrentService(host)  # type: ignore[arg-type]
    state = _queue(2)
    service.submit(state, state.pq.messages())
    try:
        await service.drain(BOUND_S)
        assert got == [0, 1], f"consumed {got}: the worker ended with the listener's CancelledError"
        assert host.sent_back == [(0, 0)]
        assert host.updates[-1] == (state.mq, 2)
    finally:
        await service.stop()


def test_a_consume_timeout_of_zero_is_refused() -> None:
    """Java's start() fails on consumeTimeout 0 (cleanExpireMsg's scheduleAtFixedRate refuses a period of 0).
    Here ConsumerConfig takes consume_timeout_s=0 (or below): the sweep loop then sleeps
    min(1, 0 / 2) = 0 s between sweeps, a busy loop on the event loop for as long as the consumer runs,
    and every listener call is failed by the next sweep (one loop turn after it began): every message
    is sent back until it reaches the DLQ. Expected: ValueError, like the other bad settings. Actual:
    accepted."""
    for bad in (0.0, -1.0):
        try:
            ConsumerConfig("G", consume_timeout_s=bad)
        except ValueError:
            continue
        raise AssertionError(f"consume_timeout_s={bad} was accepted")


class DeadLog(DeliveryLog):
    """Records the "moved to the DLQ" lines (unthrottled)."""

    def __init__(self) -> None:
        super().__init__()
        self.dead: list[str] = []

    def moved_to_dlq(self, subscription: str, group: str, msg_id: str, why: str) -> None:
        self.dead.append(why)


@pytest.mark.parametrize(("stored_times", "lines"), [(0, []), (1, ["failed 2 times", "failed 2 times"])])
async def test_a_locally_retried_messages_dlq_line_counts_as_the_broker(
    stored_times: int, lines: list[str]
) -> None:
    """A message failed and its send-back failed: it is consumed here again with reconsume_times + 1 (for
    the listener), and fails again; this time the send-back works. The broker decides on the DLQ from its
    stored copy's count (CONSUMER_SEND_MSG_BACK: stored reconsume times >= max), which the failed send-back
    did not change. Expected: the listener's "moved to the DLQ" line follows the broker's count: none when
    the stored copy had a reconsume left (the broker puts it on the retry topic), one per failure when it
    had none (the first send-back would have moved it, as the second does). Before: the copy was not found
    in the process queue (identity), so its failure was never logged as moved to the DLQ at all; keeping
    its identity with the local count would log it one reconsume early."""
    spec = SubscriptionSpec(
        name="s", topic="T", group="G", endpoint="http://127.0.0.1:9/in", max_reconsume_times=1
    )
    app = App([Answer(500, {})])
    dead = DeadLog()
    push = HttpPush(spec, cast(HttpClient, app), sleep=app.sleep, log=dead)
    host = Host(push, send_back_ok=[False, True])
    host.config = ConsumerConfig("G", consume_concurrency=1, send_back_retry_s=0.0, max_reconsume_times=1)
    state = QueueState(MessageQueue("T", "b", 0), ProcessQueue(0))
    state.pq.put([stored(0, reconsume_times=stored_times)], 1)
    push.process_queue = lambda mq: state.pq if mq == state.mq else None
    service = ConcurrentService(host)  # type: ignore[arg-type]
    service.submit(state, state.pq.messages())
    try:
        await service.drain(BOUND_S)  # failed; its send-back failed: consumed here again (host.tasks)
        async with asyncio.timeout(BOUND_S):
            await asyncio.gather(*host.tasks)  # queued again (send_back_retry_s 0)
        await service.drain(BOUND_S)  # failed again; sent back
        assert host.sent_back == [(0, stored_times), (0, stored_times + 1)]
        assert dead.dead == lines
        assert state.pq.count == 0 and host.updates[-1] == (state.mq, 1)
    finally:
        await service.stop()
