"""Review (session 30) of the gRPC subscription hub (StreamHub) against what HttpPush now does: a failure
of a queue dropped after a stream took the message is not logged as moved to the DLQ, and close() does not
wait its whole timeout for a delivery nobody holds (waiting out the app's LATER, or waiting for a stream).
Each test fails on the code it was written against for the reason its docstring gives."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from rocksidecar.app.subscriptions.runner import Subscriptions
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.app.subscriptions.stream import Answer, Delivery, StreamHub
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.app.subscriptions.test_push import MQ, message
from tests.app.subscriptions.test_push_withdrawn_and_close import Watched
from tests.rmq.consumer.helpers import WAIT_S, send_to_queues

CLOSE_S = 8.0  # close()'s wait for the calls in flight: the tests expect it to return well before


def grpc_spec(name: str, **kw: object) -> SubscriptionSpec:
    return SubscriptionSpec(
        name=name,
        topic=f"ReviewHub{name}",
        group=f"g-hub-{name}",
        endpoint="grpc",
        consume_from="first",
        **kw,  # type: ignore[arg-type]
    )


async def wired(cluster: DevCluster, spec: SubscriptionSpec) -> tuple[Subscriptions, StreamHub, PushConsumer]:
    """The sidecar's wiring of one gRPC subscription, one message waiting in its one queue."""
    await send_to_queues(cluster, spec.topic, 1, queues=1)
    subs = Subscriptions([spec], cluster.namesrv_addr, close_timeout_s=CLOSE_S)
    return subs, subs.hubs[spec.name], subs.consumers[spec.name]


async def taken(hub: StreamHub) -> Delivery:
    """A stream takes the next delivery (within WAIT_S)."""
    async with asyncio.timeout(WAIT_S):
        return await hub.next()


async def test_a_failure_of_a_queue_dropped_after_a_stream_took_it_is_not_logged_as_moved_to_the_dlq(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stream took the message (the app has it); meanwhile its queue is rebalanced away, then the app
    answers FAILED. The consumer ignores a dropped queue's result (nothing is sent back: its new owner
    delivers it again), yet the hub logs "moved to %DLQ%" for a failure with no reconsume left whatever
    the consumer then does (log_if_dead without acted_on). Expected: no DLQ line. Actual: the operator's
    log says the message is in the group's DLQ; it is not there."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        spec = grpc_spec("deadlog", max_reconsume_times=0)  # the first failure is the last one
        subs, hub, consumer = await wired(cluster, spec)
        watched = consumer.listener = Watched(hub)
        caplog.set_level(logging.INFO, logger="rocksidecar.subscriptions")
        d: Delivery | None = None
        try:
            await subs.start()
            d = await taken(hub)  # the app has the message
            state = consumer.queues[MessageQueue(spec.topic, "broker-a", 0)]
            consumer.unsubscribe(spec.topic)  # the next rebalance round removes (drops) the queue
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("queues_removed", 1)
            assert state.pq.dropped
            hub.ack(d.delivery_id, Answer.FAILED)  # the app fails it, after the queue went away
            async with asyncio.timeout(WAIT_S):
                await watched.returned.wait()
            assert consumer.stats["sent_back"] == 0 and consumer.stats["dead_lettered"] == 0
            dlq_lines = [r.getMessage() for r in caplog.records if "DLQ" in r.getMessage()]
            assert dlq_lines == [], f"logged as moved to the DLQ, never sent there: {dlq_lines}"
        finally:
            if d is not None and hub.owns(d.delivery_id):
                hub.ack(d.delivery_id, Answer.OK)
            await subs.close()


async def test_a_failure_the_consumer_sends_to_the_dlq_is_still_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The other side of the above, wired as the sidecar is: a failure with no reconsume left of a queue
    still owned is sent to the DLQ, and logged so."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        spec = grpc_spec("deadlogkept", max_reconsume_times=0)
        subs, hub, consumer = await wired(cluster, spec)
        caplog.set_level(logging.INFO, logger="rocksidecar.subscriptions")
        try:
            await subs.start()
            d = await taken(hub)
            hub.ack(d.delivery_id, Answer.FAILED)
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("sent_back", 1)
            dlq_lines = [r.getMessage() for r in caplog.records if "DLQ" in r.getMessage()]
            assert len(dlq_lines) == 1, dlq_lines
        finally:
            await subs.close()


async def _close_returns_soon(subs: Subscriptions) -> None:
    closing = asyncio.create_task(subs.close())
    try:
        done, _ = await asyncio.wait({closing}, timeout=3.0)
        assert closing in done, "close() is still waiting for a delivery no app holds"
    finally:
        await closing


async def test_close_does_not_wait_its_whole_timeout_for_a_delivery_waiting_out_a_later() -> None:
    """The app answered LATER (retry_after_ms 300 000): the hub sleeps before offering the message again,
    and nobody holds it meanwhile: whatever close() does, it stays uncommitted (delivered again after the
    restart). The sleep ignores the closing consumer, so close() waits its whole close_timeout_s for it.
    Expected: close() returns at once (well within 3 s), nothing sent back. Actual: it takes
    close_timeout_s (here 8 s; in the sidecar half the shutdown grace, up to 10 s, on every SIGTERM while
    the app says later)."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        spec = grpc_spec("closelater")
        subs, hub, consumer = await wired(cluster, spec)
        sleeping = asyncio.Event()
        real_sleep = hub._sleep

        async def sleep(seconds: float) -> None:  # the hub's own (real) sleep, watched
            sleeping.set()
            await real_sleep(seconds)

        hub._sleep = sleep
        await subs.start()
        d = await taken(hub)
        hub.ack(d.delivery_id, Answer.LATER, 300_000)
        async with asyncio.timeout(WAIT_S):
            await sleeping.wait()
        await _close_returns_soon(subs)
        assert consumer.stats["sent_back"] == 0


async def test_close_does_not_wait_its_whole_timeout_for_a_delivery_no_stream_took() -> None:
    """No app attached: the listener call waits in the hub for a stream, and no app has the message. The
    wait ignores the closing consumer, so close() waits its whole close_timeout_s for it. Expected: close()
    returns at once, nothing sent back, and no stream attaching afterwards is handed the message. Actual:
    close() takes close_timeout_s (8 s here)."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        spec = grpc_spec("closenostream")
        subs, hub, consumer = await wired(cluster, spec)
        queued = asyncio.Event()
        put = hub._queue.put

        async def watched_put(d: Delivery) -> None:
            await put(d)
            queued.set()

        hub._queue.put = watched_put  # type: ignore[method-assign, assignment]
        await subs.start()
        async with asyncio.timeout(WAIT_S):
            await queued.wait()  # waiting for a stream
        await _close_returns_soon(subs)
        assert consumer.stats["sent_back"] == 0
        late = asyncio.create_task(hub.next())  # an app attaching now gets nothing
        done, _ = await asyncio.wait({late}, timeout=0.1)
        late.cancel()
        assert not done, f"handed {late.result().msg.body!r} after close()"


async def test_a_later_of_a_queue_dropped_meanwhile_is_given_up_at_the_end_of_the_wait() -> None:
    """A delivery whose queue is dropped while it waits out LATER is not offered to a stream again: the
    call ends (a result the consumer ignores) at the end of the wait. Before, it was queued again and ended
    only once some stream came to take it (QueueDropped), holding its consume worker until then."""
    hub = StreamHub(dataclasses.replace(grpc_spec("droplater"), timeout_s=5.0))
    msg: MessageExt = message()
    pq = ProcessQueue(0)
    never = asyncio.Event()

    async def wait_closing(timeout_s: float) -> bool:  # a consumer that does not close
        await never.wait()
        return False

    hub.process_queue, hub.wait_closing = (lambda _mq: pq), wait_closing  # as the runner wires it
    woke = asyncio.Event()

    async def sleep(_s: float) -> None:
        pq.drop()  # rebalanced away while waiting out the LATER
        woke.set()

    hub._sleep = sleep
    consumed = asyncio.create_task(hub([msg], MQ))
    d = await taken(hub)
    hub.ack(d.delivery_id, Answer.LATER)
    async with asyncio.timeout(WAIT_S):
        await woke.wait()
        status = await consumed
    assert status is hub._failed  # ignored by the consumer: its queue was dropped
    assert hub._queue.empty()
    closing = hub.closing()
    assert closing is not None
    closing.cancel()
    await asyncio.gather(closing, return_exceptions=True)
