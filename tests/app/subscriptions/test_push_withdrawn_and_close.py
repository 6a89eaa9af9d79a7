"""Review (session 30) of the HTTP push and bulk delivery's state machines: a delivery waiting out the
app's "later" when its queue is rebalanced away, close() racing start(), a failed delivery's DLQ log
line, the HTTP client's close with a POST in flight. Each test fails on the code it was written against
for the reason its docstring gives."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson
import pytest

from rocksidecar.app.http_client import Answer, HttpClient, PostError
from rocksidecar.app.subscriptions.bulk import BulkPush
from rocksidecar.app.subscriptions.push import HttpPush
from rocksidecar.app.subscriptions.runner import Subscriptions
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.consumer.direct import consume_directly
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.factory import stored
from tests.rmq.consumer.helpers import WAIT_S, send_to_queues

LATER = Answer(503, {"retry-after": "300"})


class LaterApp:
    """Stands in for HttpClient (single and bulk POSTs): answers each POST from ``answers`` (the last one
    again when they run out), records the POSTs, and a ``sleep`` that waits for ``wake``."""

    def __init__(self, answers: Sequence[Answer] = (LATER,)) -> None:
        self.answers = list(answers)
        self.posts = 0
        self.posted = asyncio.Event()
        self.hold: asyncio.Event | None = None  # when set: each POST waits for it before answering
        self.sleeping = asyncio.Event()
        self.wake = asyncio.Event()

    async def post_lines(self, url: str, lines: bytes, body: bytes, timeout_s: float) -> Answer:
        return await self.post(url, body, {}, timeout_s)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        self.posts += 1
        self.posted.set()
        if self.hold is not None:
            await self.hold.wait()
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def sleep(self, seconds: float) -> None:
        """Waits for ``wake``; one wake ends the sleeps of now only (a later one waits again)."""
        self.sleeping.set()
        await self.wake.wait()
        self.wake.clear()


class Watched:
    """Wraps the consumer's listener: ``returned`` once a call has returned."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.returned = asyncio.Event()

    async def __call__(self, msgs: Sequence[MessageExt], mq: MessageQueue) -> Any:
        try:
            return await self.inner(msgs, mq)
        finally:
            self.returned.set()


async def _first_of(*events: asyncio.Event) -> set[int]:
    """Which of ``events`` are set once the first of them is (within WAIT_S)."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return {i for i, e in enumerate(events) if e.is_set()}


@pytest.mark.parametrize(
    "kind",
    ["push", "bulk", "orderly"],
)
async def test_a_delivery_waiting_out_a_503_stops_when_its_queue_is_rebalanced_away(kind: str) -> None:
    """The app answered 503 (Retry-After) and the listener waits to POST again. Meanwhile the queue is
    rebalanced away (here: unsubscribed; a new member joining does the same): the consumer drops it, its
    new owner delivers the message, and this member's result is ignored (``pq.dropped``). The listener
    must then give the message up (return) rather than POST it again: StreamHub does exactly that
    (``process_queue``, spans.Withdrawn); HttpPush.deliver and BulkPush._post loop ``while True`` with no
    look at the queue. Expected: after the wake, the listener returns without another POST. Actual: it
    POSTs the message of a queue it no longer owns again (a duplicate beside the new owner's delivery;
    orderly mode does the same), and goes on doing so every
    Retry-After for as long as the app says later, holding one of the subscription's workers."""
    topic, name = f"ReviewLater{kind}", f"later-{kind}"
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, topic, 1, queues=1)
        spec = SubscriptionSpec(
            name=name,
            topic=topic,
            group=f"g-{name}",
            endpoint="http://127.0.0.1:9/in",
            consume_from="first",
            mode="orderly" if kind == "orderly" else "concurrent",
            bulk=kind == "bulk",
        )
        subs = Subscriptions([spec], cluster.namesrv_addr, close_timeout_s=0.5)
        consumer = subs.consumers[name]
        app = LaterApp()
        push = consumer.listener
        assert isinstance(push, HttpPush)
        push._client = cast(HttpClient, app)
        push._sleep = app.sleep
        watched = consumer.listener = Watched(push)
        try:
            await subs.start()
            async with asyncio.timeout(WAIT_S):
                await app.sleeping.wait()  # POSTed once, answered 503, waiting out the Retry-After
            assert app.posts == 1
            mq = MessageQueue(topic, "broker-a", 0)
            state = consumer.queues[mq]
            consumer.unsubscribe(topic)  # the next rebalance round removes (drops) the queue
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("queues_removed", 1)
            assert state.pq.dropped
            app.posted.clear()
            app.wake.set()  # the Retry-After is over
            first = await _first_of(watched.returned, app.posted)
            assert first == {0}, (
                f"after its queue was rebalanced away the listener POSTed the message again "
                f"({app.posts} POSTs) instead of giving it up"
            )
        finally:
            await subs.close()


async def test_close_during_start_leaves_no_subscription_running() -> None:
    """Subscriptions.start() starts the consumers one after another; close() arriving meanwhile (the
    consumer being started stops after its current step) returns while the later consumers have not
    begun: PushConsumer.close() of a consumer not started returns at once without marking it closed, and
    start() then starts it anyway. Expected: once close() has returned and start() has come back, no
    consumer runs and no flusher task is left. Actual: the second subscription's consumer is started
    after close(): it joins the group, owns queues and delivers through the HTTP client close() already
    closed (every POST fails "client closed": each message sent back, its reconsumes burnt down to the
    DLQ), and nothing will ever close it; the log flusher task started after close() runs for ever."""
    async with DevCluster(brokers=1, queues=1) as cluster:
        specs = [
            SubscriptionSpec(
                name=n, topic=f"ReviewStart{n}", group=f"g-start-{n}", endpoint="http://127.0.0.1:9/x"
            )
            for n in ("first", "second")
        ]
        for spec in specs:
            await send_to_queues(cluster, spec.topic, 1, queues=1)
        subs = Subscriptions(specs, cluster.namesrv_addr, close_timeout_s=0.5)
        first, second = subs.consumers["first"], subs.consumers["second"]
        entered, release = asyncio.Event(), asyncio.Event()
        real_load = first.offsets.load

        async def slow_load() -> None:  # a name server or broker slow to answer at start-up
            entered.set()
            await release.wait()
            await real_load()

        first.offsets.load = slow_load  # type: ignore[method-assign]
        starting = asyncio.create_task(subs.start())
        try:
            async with asyncio.timeout(WAIT_S):
                await entered.wait()
            await subs.close()
            release.set()
            async with asyncio.timeout(WAIT_S):
                # start() may come back quietly or say it was closed: either way nothing may run now
                await asyncio.gather(starting, return_exceptions=True)
            running = [n for n, c in subs.consumers.items() if c.started and not c.closing]
            assert running == [], f"consumers running after close(): {running}"
            assert subs._flusher is None, "the log flusher was started after close()"
        finally:
            release.set()
            if not starting.done():
                starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            if subs._flusher is not None:
                subs._flusher.cancel()
            await second.close()
            await first.close()


async def test_a_failure_of_a_dropped_queue_is_not_logged_as_moved_to_the_dlq(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The listener logs "moved to %DLQ%" for a failed message with no reconsume left before the consumer
    has decided anything. When its queue was rebalanced away while the app worked on it, the consumer
    ignores the result (``pq.dropped``: nothing is sent back, the new owner delivers it again). Expected:
    no DLQ line. Actual: the operator's log says the message was moved to the group's DLQ; it is not
    there (the new owner has it)."""
    topic, name = "ReviewDeadLog", "deadlog"
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, topic, 1, queues=1)
        spec = SubscriptionSpec(
            name=name,
            topic=topic,
            group="g-deadlog",
            endpoint="http://127.0.0.1:9/in",
            consume_from="first",
            max_reconsume_times=0,  # the first failure is the last one
        )
        subs = Subscriptions([spec], cluster.namesrv_addr, close_timeout_s=0.5)
        consumer = subs.consumers[name]
        app = LaterApp([Answer(500)])
        app.hold = asyncio.Event()
        push = consumer.listener
        assert isinstance(push, HttpPush)
        push._client = cast(HttpClient, app)
        watched = consumer.listener = Watched(push)
        caplog.set_level(logging.INFO, logger="rocksidecar.subscriptions")
        try:
            await subs.start()
            async with asyncio.timeout(WAIT_S):
                await app.posted.wait()  # the app has the message
            state = consumer.queues[MessageQueue(topic, "broker-a", 0)]
            consumer.unsubscribe(topic)
            async with asyncio.timeout(WAIT_S):
                await consumer.stats.reach("queues_removed", 1)
            assert state.pq.dropped
            app.hold.set()  # the app answers 500, after the queue went away
            async with asyncio.timeout(WAIT_S):
                await watched.returned.wait()
            assert consumer.stats["sent_back"] == 0 and consumer.stats["dead_lettered"] == 0
            dlq_lines = [r.getMessage() for r in caplog.records if "DLQ" in r.getMessage()]
            assert dlq_lines == [], f"logged as moved to the DLQ, never sent there: {dlq_lines}"
        finally:
            app.hold.set()
            await subs.close()


async def test_an_operators_resend_the_app_drops_is_not_logged_as_moved_to_the_dlq(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator's "resend message" (CONSUME_MESSAGE_DIRECTLY) gives the listener one message outside
    any queue: nothing is sent back whatever the answer (rmq.consumer.direct). A bulk app answering DROP
    makes BulkPush log "moved to %DLQ%... (the app answered DROP)" all the same. Expected: no DLQ line
    (the broker is answered CR_LATER). Actual: the log tells the operator the message is in the DLQ, where
    it never went."""
    spec = SubscriptionSpec(name="o", topic="T", group="G", endpoint="http://127.0.0.1:9/in", bulk=True)
    msg = stored(7, b"x", queue_id=0)
    app = LaterApp([Answer(200, {}, orjson.dumps({"statuses": [{"entryId": "7", "status": "DROP"}]}))])
    push = BulkPush(spec, cast(HttpClient, app), sleep=app.sleep)
    # wired to its consumer as the runner does (Subscriptions): here a member owning no queue of it
    push.process_queue = lambda _mq: None
    caplog.set_level(logging.INFO, logger="rocksidecar.subscriptions")
    result = orjson.loads(await consume_directly(push, msg, MessageQueue("T", "b", 0), orderly=False))
    assert result["consumeResult"] == "CR_LATER"
    dlq_lines = [r.getMessage() for r in caplog.records if "DLQ" in r.getMessage()]
    assert dlq_lines == [], f"logged as moved to the DLQ, never sent there: {dlq_lines}"


async def test_closing_the_client_fails_a_post_in_flight_without_posting_it_again() -> None:
    """HttpClient.close() with a POST waiting for its answer on a reused keep-alive connection: the close
    drops the connection, the exchange sees ConnectionResetError and post_lines takes that for "the app
    dropped an idle connection" and goes on: it connects anew and sends the request again, after close()
    (``_closed`` is only checked on entry) and with the sweeper close() cancelled, so without any
    timeout. Expected: the POST fails with PostError and nothing more reaches the app. Actual: a new
    connection carries the same request again after close() (the app gets it twice) and the POST then
    waits for ever on an app that does not answer."""
    connections = 0
    requests = 0
    held, second_connection = asyncio.Event(), asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections, requests
        connections += 1
        if connections > 1:
            second_connection.set()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                requests += 1
                if requests == 1:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                else:
                    held.set()  # the app works on it (and never answers)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/in"
    client = HttpClient()
    second: asyncio.Task[Answer] | None = None
    try:
        assert (await client.post(url, b"one", {}, 30.0)).status == 200  # the connection is now pooled
        second = asyncio.create_task(client.post(url, b"two", {}, 30.0))  # on that reused connection
        async with asyncio.timeout(WAIT_S):
            await held.wait()
        await client.close()
        done = asyncio.Event()
        second.add_done_callback(lambda _t: done.set())
        first = await _first_of(done, second_connection)
        assert first == {0}, (
            f"after close() the POST connected again ({connections} connections, {requests} requests)"
        )
        with pytest.raises(PostError):
            await second
    finally:
        second_connection.set()
        if second is not None:
            second.cancel()
            await asyncio.gather(second, return_exceptions=True)
        await client.close()
        server.close()
        await server.wait_closed()


async def test_close_does_not_wait_its_whole_timeout_for_a_delivery_only_waiting_out_a_retry_after() -> None:
    """close() waits up to close_timeout_s "for what its app holds" (runner.CLOSE_WAIT_MAX_S); a delivery
    the app answered 503 with Retry-After: 300 is held by nobody: the sidecar only sleeps before POSTing
    again, and whatever close() does it stays uncommitted (delivered again after the restart). The sleep
    ignores the closing consumer, so close() waits out its whole timeout for it. Expected: close() returns
    at once (well within 3 s). Actual: it takes close_timeout_s (here 8 s; in the sidecar half the
    shutdown grace, up to 10 s, on every SIGTERM while the app says later)."""
    topic, name = "ReviewCloseLater", "close-later"
    async with DevCluster(brokers=1, queues=1) as cluster:
        await send_to_queues(cluster, topic, 1, queues=1)
        spec = SubscriptionSpec(
            name=name,
            topic=topic,
            group="g-close-later",
            endpoint="http://127.0.0.1:9/in",
            consume_from="first",
        )
        subs = Subscriptions([spec], cluster.namesrv_addr, close_timeout_s=8.0)
        consumer = subs.consumers[name]
        app = LaterApp()  # 503, Retry-After: 300; the listener's own (real) sleep
        push = consumer.listener
        assert isinstance(push, HttpPush)
        push._client = cast(HttpClient, app)
        closing: asyncio.Task[None] | None = None
        try:
            await subs.start()
            async with asyncio.timeout(WAIT_S):
                await app.posted.wait()
            await asyncio.sleep(0)  # the listener goes on into its Retry-After sleep
            closing = asyncio.create_task(subs.close())
            done, _ = await asyncio.wait({closing}, timeout=3.0)
            assert closing in done, (
                "close() is still waiting for a delivery that only sleeps out a Retry-After"
            )
        finally:
            if closing is None:
                await subs.close()
            else:
                await closing
