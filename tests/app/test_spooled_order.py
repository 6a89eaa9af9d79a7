"""Order of one sharding key's messages in a batch spooled or delayed together (session 31 review).

A batch's ids share one time stamp and end in a 16-bit counter (rmq/msgid.py). The retry store orders its
keys due:count:type:id and the delay store due:id, so a batch of one key that shares a due time is replayed
or published in id order: a batch whose counter wrapped inside it (about 1 in 65 of 1000-message batches)
had its tail first. And a key's order across an outage (retry.lanes): its spooled messages replayed in
their order, its later ones held behind them, on every send path.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.delivery_policy import BEHIND
from rocksidecar.app.request import Prepared
from rocksidecar.app.sidecar import Ack, Outcome, Sidecar, Status
from rocksidecar.app.store_delivery import StoreDelivery
from rocksidecar.delay import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay import SPOOLED, DelayedMessage, DelayScheduler, DelayStore, StoredAt
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.rmq import Message, MessageQueue, RocketMQError, SendResult, SendStatus, msgid
from rocksidecar.rmq.errors import RequestTimeout
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.app.conftest import Stack
from tests.fakes import FakeWallClock

KEY = "customer-7"
ROOT = Path(__file__).resolve().parents[2]


def _key_queue_order(stack: Stack, topic: str, bodies: set[bytes]) -> list[str]:
    """The bodies of ``bodies`` as the broker stored them: all on one queue (asserted), by queue offset."""
    found = [
        (name, m.queue_id, m.queue_offset, m.body)
        for name, b in stack.cluster.brokers.items()
        for m in b.messages(topic)
        if m.body in bodies
    ]
    assert len(found) == len(bodies), f"not every message was stored once: {found}"
    queues = {(name, q) for name, q, _, _ in found}
    assert len(queues) == 1, f"one sharding key, several queues: {queues}"
    return [body.decode() for *_, body in sorted(found, key=lambda f: f[2])]


async def _warm(stack: Stack, topic: str) -> None:
    """Create the topic (its route) first, so every send below uses the same queue count."""
    r = await stack.http.post("/v1/messages", json={"topic": topic, "body": "warm-up"})
    assert r.status_code == 200, r.text


async def test_a_batch_of_one_key_spooled_together_is_replayed_in_its_order_across_the_id_counter_wrap(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one sharding key spooled together (ack=spool here; a batch that failed in an outage
    alike) shares one due time: the replay sends it in its lane's order (retry.lanes), the batch's, not
    in the order of its ids. The counter is set just before the wrap here."""
    topic = "OrderedWrap"
    await _warm(stack, topic)
    monkeypatch.setattr(msgid._default, "_counter", itertools.count(0xFFFE))
    msgs = [{"topic": topic, "body": f"m{i}", "shardingKey": KEY} for i in range(4)]
    r = await stack.http.post("/v1/messages:batch", params={"ack": "spool"}, json={"messages": msgs})
    assert r.status_code == 200, r.text
    assert [x["status"] for x in r.json()["results"]] == ["SPOOLED"] * 4
    await stack.drain()
    assert _key_queue_order(stack, topic, {f"m{i}".encode() for i in range(4)}) == ["m0", "m1", "m2", "m3"]


async def test_a_delayed_batch_of_one_key_with_one_due_time_is_published_in_its_order_across_the_wrap(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delay store orders its due keys due:id (delay/keys.py due_key): messages of one key due at the
    same millisecond (a batch with one deliverAt, or one delayMs: one clock read per batch) are published
    in id order, and a batch's ids wrapped at the 16-bit counter like above."""
    topic = "OrderedDelayWrap"
    await _warm(stack, topic)
    monkeypatch.setattr(msgid._default, "_counter", itertools.count(0xFFFE))
    msgs = [{"topic": topic, "body": f"m{i}", "shardingKey": KEY, "delayMs": 50} for i in range(4)]
    r = await stack.http.post("/v1/messages:batch", json={"messages": msgs})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["SCHEDULED"] * 4
    await stack.until_published(max(x["deliverAt"] for x in results))
    assert _key_queue_order(stack, topic, {f"m{i}".encode() for i in range(4)}) == ["m0", "m1", "m2", "m3"]


def test_readme_states_the_keys_order_across_an_outage_the_dead_letter_rule_and_the_upgrade() -> None:
    """The retry store's lanes keep a key's spooled messages in their order and hold its later ones behind
    them (the tests below); README promises it, says what a dead letter does to the order and what an
    upgrade from a version without lanes leaves unordered, and no longer discloses the opposite."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "loses its place" not in readme and "can land after later messages of its key" not in readme
    assert (
        "A topic's sharding key keeps its messages in the order the sidecar answered them, across an outage"
        in readme
    )
    assert "`lastError` `waits behind an earlier spooled message of its sharding key`" in readme
    assert (
        "lets the next one of its key go, as Java's orderly consumer moves on after `maxReconsumeTimes`"
        in readme
    )
    assert "Upgrading from a version without lanes" in readme


# --- a sharding key's order across an outage: the retry store's lanes (retry.lanes) --------------------


class KeyedBroker:
    """A Sender that stores what it takes in arrival order; while ``down``, or for an id with failures
    left in ``fail``, every send fails as a broker out of reach does (spooled, retried)."""

    def __init__(self) -> None:
        self.down = False
        self.fail: dict[str, int] = {}
        self.stored: list[tuple[str | None, str]] = []  # (sharding key, body), in the order stored

    def order(self, key: str) -> list[str]:
        return [body for k, body in self.stored if k == key]

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        if self.down or self.fail.get(msg.id or "", 0) > 0:
            if not self.down:
                self.fail[msg.id or ""] -= 1
            raise RequestTimeout("the broker did not answer")
        self.stored.append((sharding_key, msg.body.decode()))
        mq = MessageQueue(msg.topic, "broker-a", 0)
        return SendResult(SendStatus.SEND_OK, msg.id or "", "offset-id", mq, len(self.stored) - 1)

    async def send_batch(
        self,
        messages: Sequence[Message],
        sharding_keys: Sequence[str | None] | None = None,
        *,
        validated: bool = False,
    ) -> list[SendResult | RocketMQError]:
        keys = list(sharding_keys) if sharding_keys is not None else [None] * len(messages)
        out: list[SendResult | RocketMQError] = []
        for m, k in zip(messages, keys, strict=True):
            try:
                out.append(await self.send(m, sharding_key=k))
            except RocketMQError as exc:
                out.append(exc)
        return out


LADDERS = {"slow": RetryPolicy((10.0,), 1000), "fast": RetryPolicy((1.0,), 1000)}
FIRST_RUNG_MS = 3_000  # the default ladder's (types other than slow and fast)


@dataclass
class Lanes:
    """The sidecar over a retry store (MemoryKV, a fake clock) replayed by 8 workers with batch delivery,
    sending to a KeyedBroker: what app.assembly builds, without the network."""

    clock: FakeWallClock
    broker: KeyedBroker
    retry: RetryStore
    delivery: StoreDelivery
    sidecar: Sidecar
    replay: ReplayLoop
    ids: Iterator[int] = field(default_factory=itertools.count)

    def prepared(self, body: str, key: str | None = KEY, *, type_: str = "orders", id_: str = "") -> Prepared:
        id_ = id_ or f"{body}-{next(self.ids)}"
        return Prepared(Message("Orders", body.encode(), id=id_), key, type_, None)

    async def send(self, body: str, key: str | None = KEY, ack: Ack = Ack.BROKER) -> Outcome:
        return await self.sidecar.send(self.prepared(body, key), ack)

    async def run(self, seconds: float, step: float = 0.5) -> None:
        """The ladder's time passing, the replay settled at each step."""
        for _ in range(round(seconds / step)):
            self.clock.advance(step)
            await asyncio.wait_for(self.replay.wait_idle(), 10)


@pytest.fixture
async def lanes() -> AsyncIterator[Lanes]:
    clock = FakeWallClock()
    kv = MemoryKV((*RETRY_CFS, *DELAY_CFS))
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer, now_ms=clock.now_ms, clock=clock.monotonic)
    delay = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    broker = KeyedBroker()

    def policy_for(type_: str) -> RetryPolicy:
        return LADDERS.get(type_, RetryPolicy())

    delivery = StoreDelivery(broker, retry, delay, policy_for=policy_for, now_ms=retry.now_ms, lanes=retry)
    sidecar = Sidecar(broker, retry, policy_for=policy_for, now_ms=retry.now_ms, lanes=retry)
    replay = ReplayLoop(
        retry, delivery.redeliver, policy_for, workers=8, deliver_batch=delivery.redeliver_batch,
        batch_max=32, sleep=clock.sleep,
    )  # fmt: skip
    await replay.start()
    yield Lanes(clock, broker, retry, delivery, sidecar, replay)
    await replay.close()
    await retry.close()
    await writer.close()


async def test_a_keys_messages_sent_in_an_outage_reach_the_broker_in_request_order(lanes: Lanes) -> None:
    """ack=broker, the broker down: the first of the key fails and is spooled; the next ones are spooled
    behind it untried, told so, with its next attempt. Back up, the head fails two replays more (the
    ladder moves it to later rungs): the others still go after it, in their order."""
    lanes.broker.down = True
    first = await lanes.send("A")
    assert first.status is Status.SPOOLED and first.last_error != BEHIND
    later = [await lanes.send(body) for body in ("B", "C")]
    assert {(o.status, o.last_error, o.next_attempt_at_ms) for o in later} == {
        (Status.SPOOLED, BEHIND, first.next_attempt_at_ms)
    }
    unkeyed = await lanes.send("U", None)
    lanes.broker.down = False
    lanes.broker.fail[first.id] = 2
    await lanes.run(FIRST_RUNG_MS / 1000 + 5)  # its first two replays fail (the ladder's 3 s and 5 s)
    assert lanes.broker.order(KEY) == [] and lanes.broker.fail[first.id] == 0
    await lanes.run(30)  # the third rung
    assert lanes.broker.order(KEY) == ["A", "B", "C"]
    assert unkeyed.status is Status.SPOOLED and unkeyed.last_error != BEHIND
    assert [body for key, body in lanes.broker.stored if key is None] == ["U"]
    assert lanes.retry.pending_count == 0 and lanes.retry.lanes_open == 0
    sent = await lanes.send("D")  # the lane is empty: straight to the broker
    assert sent.status is Status.SENT and lanes.broker.order(KEY) == ["A", "B", "C", "D"]


async def test_a_message_of_the_key_sent_while_one_is_spooled_is_spooled_behind_it(lanes: Lanes) -> None:
    """The broker is back, but the key's first message waits for its next rung: a later one sent now
    would be stored before it. It is answered 202 SPOOLED and stored after it."""
    lanes.broker.down = True
    first = await lanes.send("A")
    lanes.broker.down = False
    later = await lanes.send("B")
    assert (later.status, later.last_error) == (Status.SPOOLED, BEHIND)
    assert later.next_attempt_at_ms == first.next_attempt_at_ms
    status = lanes.retry.get(later.id)
    assert status is not None and status.state is Status.SPOOLED
    assert (status.next_attempt_at_ms, status.last_error, status.attempts) == (
        first.next_attempt_at_ms,
        BEHIND,
        0,
    )
    other = await lanes.send("X", "other-key")
    assert other.status is Status.SENT  # another key is not held back
    assert lanes.broker.order(KEY) == []
    await lanes.run(FIRST_RUNG_MS / 1000)
    assert lanes.broker.order(KEY) == ["A", "B"]


async def test_a_batch_with_items_of_a_busy_lane_spools_those_behind_it_and_sends_the_rest(
    lanes: Lanes,
) -> None:
    lanes.broker.down = True
    spooled = await lanes.sidecar.send_batch([lanes.prepared("A1"), lanes.prepared("A2")])
    assert [o.status for o in spooled if isinstance(o, Outcome)] == [Status.SPOOLED] * 2
    lanes.broker.down = False
    batch = [lanes.prepared("A3"), lanes.prepared("V", "other-key"), lanes.prepared("A4")]
    results = await lanes.sidecar.send_batch(batch)
    assert [(o.status, o.last_error) for o in results if isinstance(o, Outcome)] == [
        (Status.SPOOLED, BEHIND), (Status.SENT, None), (Status.SPOOLED, BEHIND),
    ]  # fmt: skip
    await lanes.run(FIRST_RUNG_MS / 1000)
    assert lanes.broker.order(KEY) == ["A1", "A2", "A3", "A4"]
    assert lanes.broker.order("other-key") == ["V"]


async def test_a_batch_of_one_key_whose_items_fail_with_different_rungs_keeps_its_order(lanes: Lanes) -> None:
    """Items of one key with different types fail with different first rungs; each due time is spooled in
    a call of its own, concurrently (spool_by_due). Another key's item of the later item's rung is first
    in the batch: without one due time for the key's items, its call would make the later item the head."""
    lanes.broker.down = True
    batch = [
        lanes.prepared("X", "other-key", type_="fast"),
        lanes.prepared("A1", type_="slow"),
        lanes.prepared("A2", type_="fast"),
    ]
    results = await lanes.sidecar.send_batch(batch)
    assert all(isinstance(o, Outcome) and o.status is Status.SPOOLED for o in results)
    lanes.broker.down = False
    await lanes.run(11)
    assert lanes.broker.order(KEY) == ["A1", "A2"]


@pytest.mark.parametrize("batch", [False, True], ids=["single-sends", "one-batch"])
async def test_ack_spool_of_one_key_in_one_millisecond_is_delivered_in_request_order(
    lanes: Lanes, batch: bool
) -> None:
    """The clock does not move: every message has the same due time; the ids sort against the request's
    order. Single sends are in flight together (one group commit): their calls' order is the request
    order. The store's lane, not the pending keys' order, decides."""
    ids = ["m9", "m8", "m7", "m6", "m5"]
    prepared = [lanes.prepared(i, id_=i) for i in ids]
    if batch:
        results = await lanes.sidecar.send_batch(prepared, Ack.SPOOL)
    else:
        results = await asyncio.gather(*(lanes.sidecar.send(p, Ack.SPOOL) for p in prepared))
    assert all(isinstance(o, Outcome) and o.status is Status.SPOOLED for o in results)
    await asyncio.wait_for(lanes.replay.wait_idle(), 10)
    assert lanes.broker.order(KEY) == ids


async def test_a_delayed_message_due_while_its_keys_lane_is_busy_is_spooled_behind_it(lanes: Lanes) -> None:
    """Published at its due time it would be stored before the key's spooled messages: it waits behind
    them instead (SPOOLED to the scheduler, as a failed publish is), and goes after them."""
    lanes.broker.down = True
    await lanes.send("A")
    lanes.broker.down = False
    now = lanes.retry.now_ms()
    due = DelayedMessage("D1", "Orders", b"D", sharding_key=KEY, type="orders", due_ms=now)
    free = DelayedMessage("E1", "Orders", b"E", sharding_key="other-key", type="orders", due_ms=now)
    assert await lanes.delivery.publish_delayed([due, free]) == [
        SPOOLED,
        StoredAt("broker-a", 0, 0, "offset-id"),
    ]
    status = lanes.retry.get("D1")
    assert status is not None and status.last_error == BEHIND
    await lanes.run(FIRST_RUNG_MS / 1000)
    assert lanes.broker.order(KEY) == ["A", "D"]
    assert lanes.broker.order("other-key") == ["E"]


class HeldBroker(KeyedBroker):
    """A KeyedBroker that does not answer a body of ``held`` until its event is set, then fails it as a
    send that timed out (retriable: spooled); ``entered`` is set when it arrives, ``took`` at each message
    stored."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, asyncio.Event] = {}
        self.entered: dict[str, asyncio.Event] = {}
        self.took = asyncio.Event()

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        body = msg.body.decode()
        if body in self.held:
            self.entered.setdefault(body, asyncio.Event()).set()
            await self.held.pop(body).wait()
            raise RequestTimeout("the broker did not answer within the send timeout")
        result = await super().send(msg, sharding_key=sharding_key, validated=validated)
        self.took.set()
        return result

    async def stores(self, *bodies: str) -> None:
        """Until every body of ``bodies`` is stored."""
        while not set(bodies) <= {body for _, body in self.stored}:
            self.took.clear()
            await self.took.wait()


@dataclass
class Scheduled:
    """The delay scheduler and the retry replay over one StoreDelivery with the store's lanes, as
    app.store_delivery.delivery_loops wires them, on a fake clock; the scheduler not started."""

    clock: FakeWallClock
    broker: HeldBroker
    retry: RetryStore
    delay: DelayStore
    delivery: StoreDelivery
    scheduler: DelayScheduler
    replay: ReplayLoop
    waited: asyncio.Event  # set each time the scheduler's seek loop goes to wait (its sleep called)

    async def seek_loop_waits(self) -> None:
        """Until the scheduler's seek loop has done what is due now and gone to wait (its sleep called)."""
        await asyncio.wait_for(self.waited.wait(), 10)
        self.waited.clear()


@pytest.fixture
async def scheduled() -> AsyncIterator[Scheduled]:
    clock = FakeWallClock()
    kv = MemoryKV((*RETRY_CFS, *DELAY_CFS))
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer, now_ms=clock.now_ms, clock=clock.monotonic)
    delay = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    broker = HeldBroker()
    waited = asyncio.Event()
    ladder = RetryPolicy((1.0,), 1000)

    def scheduler_sleep(seconds: float) -> asyncio.Future[None]:
        waited.set()
        return clock.sleep(seconds)

    delivery = StoreDelivery(
        broker, retry, delay, policy_for=lambda _t: ladder, now_ms=retry.now_ms, lanes=retry
    )
    scheduler = DelayScheduler(delay, delivery.publish_delayed, sleep=scheduler_sleep)
    replay = ReplayLoop(
        retry, delivery.redeliver, lambda _t: ladder, workers=4, deliver_batch=delivery.redeliver_batch,
        batch_max=32, sleep=clock.sleep,
    )  # fmt: skip
    await replay.start()
    yield Scheduled(clock, broker, retry, delay, delivery, scheduler, replay, waited)
    await scheduler.close()
    await replay.close()
    await retry.close()
    await writer.close()


async def test_a_delayed_message_due_while_its_keys_earlier_one_is_being_published_is_not_stored_first(
    scheduled: Scheduled,
) -> None:
    """The scheduler runs several publish calls at once (MAX_IN_FLIGHT), and a message still on its way
    is in no lane yet. D1 and D2 of one key, D1 due first: D1's publish is on its way (the broker slow to
    answer) when D2 falls due. Published by another call, D2 would be stored, and D1, whose publish then
    times out, spooled and stored after it. D2 waits for D1's publish to settle, then is held behind it."""
    s = scheduled
    now = s.clock.now_ms()
    release_d1 = s.broker.held["D1"] = asyncio.Event()
    d1_on_its_way = s.broker.entered.setdefault("D1", asyncio.Event())
    await s.delay.schedule(DelayedMessage("d1", "Orders", b"D1", sharding_key=KEY, due_ms=now + 1000))
    await s.delay.schedule(DelayedMessage("d2", "Orders", b"D2", sharding_key=KEY, due_ms=now + 2000))
    # another key, due much later: the seek loop sleeps towards it once D1 and D2 are done with
    await s.delay.schedule(DelayedMessage("x", "Orders", b"X", sharding_key="other", due_ms=now + 600_000))
    await s.scheduler.start()
    await s.seek_loop_waits()  # nothing due yet

    s.clock.advance(1.0)  # D1 due: its publish call starts, and the broker does not answer yet
    await asyncio.wait_for(d1_on_its_way.wait(), 10)
    await s.seek_loop_waits()
    s.clock.advance(1.0)  # D2 due, D1's publish still on its way
    await s.seek_loop_waits()

    release_d1.set()  # D1's publish times out: spooled for the retry store's replay
    await asyncio.wait_for(s.scheduler.wait_idle(), 10)
    held = s.retry.get("d2")
    assert held is not None and held.last_error == BEHIND
    for _ in range(4):  # the ladder's first rung (1 s) passes: the replay sends what was spooled
        s.clock.advance(0.5)
        await asyncio.wait_for(s.scheduler.wait_idle(), 10)
        await asyncio.wait_for(s.replay.wait_idle(), 10)
    assert s.retry.pending_count == 0
    assert s.broker.order(KEY) == ["D1", "D2"]


async def test_a_delayed_message_waits_only_for_its_own_keys_publish_on_its_way(scheduled: Scheduled) -> None:
    """Publish calls at once (as the scheduler makes them): the later call's message of the key waits for
    the earlier call's, but its messages of another key and without a key go at once; once both calls
    are done no lane is remembered."""
    s = scheduled
    now = s.clock.now_ms()
    release_d1 = s.broker.held["D1"] = asyncio.Event()
    d1_on_its_way = s.broker.entered.setdefault("D1", asyncio.Event())
    first = asyncio.create_task(
        s.delivery.publish_delayed([DelayedMessage("d1", "Orders", b"D1", sharding_key=KEY, due_ms=now)])
    )
    await asyncio.wait_for(d1_on_its_way.wait(), 10)
    second = asyncio.create_task(
        s.delivery.publish_delayed(
            [
                DelayedMessage("d2", "Orders", b"D2", sharding_key=KEY, due_ms=now),
                DelayedMessage("x", "Orders", b"X", sharding_key="other-key", due_ms=now),
                DelayedMessage("u", "Orders", b"U", due_ms=now),
            ]
        )
    )
    await asyncio.wait_for(s.broker.stores("X", "U"), 10)  # while D1 is still on its way
    assert s.broker.order(KEY) == [] and not second.done()
    release_d1.set()
    assert await asyncio.wait_for(first, 10) == [SPOOLED]
    d2, x, u = await asyncio.wait_for(second, 10)
    assert d2 is SPOOLED and isinstance(x, StoredAt) and isinstance(u, StoredAt)
    held = s.retry.get("d2")
    assert held is not None and held.last_error == BEHIND
    assert not s.delivery._publishing  # bounded: a lane is remembered only while it is being published


async def test_http_a_later_message_of_a_spooled_key_is_answered_202_and_stored_after_it(
    stack: Stack,
) -> None:
    """End to end, devbroker: the brokers stop, a message of the key is spooled; the next is answered 202
    SPOOLED (waits behind), also over gRPC, and the broker's queue holds them in request order once the
    store drains."""
    topic = "OrderedOutage"
    await _warm(stack, topic)
    await stack.stop_brokers()
    first = await stack.http.post("/v1/messages", json={"topic": topic, "body": "m0", "shardingKey": KEY})
    assert first.status_code == 202, first.text
    second = await stack.http.post("/v1/messages", json={"topic": topic, "body": "m1", "shardingKey": KEY})
    assert second.status_code == 202, second.text
    assert second.json()["lastError"] == BEHIND
    assert second.json()["nextAttemptAt"] == first.json()["nextAttemptAt"]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        stub = pb_grpc.SidecarStub(channel)
        third = await stub.Send(pb.SendRequest(message=pb.Message(topic=topic, body="m2", sharding_key=KEY)))
        assert third.status == pb.SPOOLED and third.last_error == BEHIND
    batch = [
        {"topic": topic, "body": "m3", "shardingKey": KEY},
        {"topic": topic, "body": "m4", "shardingKey": KEY},
    ]
    r = await stack.http.post("/v1/messages:batch", json={"messages": batch})
    assert [x["lastError"] for x in r.json()["results"]] == [BEHIND, BEHIND]
    status = await stack.http.get(f"/v1/messages/{second.json()['id']}")
    assert (
        status.json()["status"] == "SPOOLED"
        and status.json()["nextAttemptAt"] == first.json()["nextAttemptAt"]
    )
    listed = (await stack.http.get("/v1/admin/retries", params={"topic": topic})).json()["items"]
    assert [(i["bodyBytes"], i.get("waiting", False)) for i in listed] == [(2, False)] + [(2, True)] * 4
    assert {i["nextAttemptAtMs"] for i in listed} == {first.json()["nextAttemptAt"]}
    shown = (await stack.http.get(f"/v1/admin/messages/{second.json()['id']}")).json()["retry"]
    assert (shown["state"], shown["topic"], shown["lastError"]) == ("SPOOLED", topic, BEHIND)
    stats = (await stack.http.get("/v1/admin/stats")).json()
    assert stats["retry"]["pending"] == 5
    await stack.start_brokers()
    await stack.drain()
    bodies = {f"m{i}".encode() for i in range(5)}
    assert _key_queue_order(stack, topic, bodies) == ["m0", "m1", "m2", "m3", "m4"]


class StaleLanes:
    """Says every key's lane holds a message due in 30 minutes: as a lane read just before its last
    message left the store."""

    lanes_open = 1

    def lane_head_due(self, topic: str, sharding_key: str) -> int | None:
        return 1_800_000 + 1_700_000_000_000


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_a_message_held_behind_a_lane_that_empties_meanwhile_goes_at_once(
    lanes: Lanes, batch: bool
) -> None:
    """Not at the due time of the message it was to wait for (up to the ladder's 30 minutes away): once
    the lane has nothing left, it is the lane's first, due when it was spooled."""
    sidecar = Sidecar(
        lanes.broker,
        lanes.retry,
        policy_for=lambda _t: RetryPolicy(),
        now_ms=lanes.retry.now_ms,
        lanes=StaleLanes(),
    )
    prepared = lanes.prepared("A")
    if batch:
        [answer] = await sidecar.send_batch([prepared])
    else:
        answer = await sidecar.send(prepared)
    assert isinstance(answer, Outcome) and (answer.status, answer.last_error) == (Status.SPOOLED, BEHIND)
    await asyncio.wait_for(lanes.replay.wait_idle(), 10)
    assert lanes.broker.order(KEY) == ["A"]
