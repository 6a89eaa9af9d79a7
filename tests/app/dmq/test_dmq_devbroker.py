"""Rock-DMQ service mode on devbroker: the inner format's round trip, dedup of redeliveries, cancel
through the inner topic, RocketMQ 5 timer properties."""

from __future__ import annotations

import re

import httpx

from rocksidecar.app.dmq import inner
from rocksidecar.delay import DELAY_DUE_AT, DELAY_PUBLISHED_AT, DelayState
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.msgid import new_uniq_id
from tests.app.dmq.conftest import INNER_TOPIC, REAL_TOPIC, DmqStack

BODY = bytes(range(256)) * 3  # every byte value, so any re-encoding would show


async def send_inner(stack: DmqStack, msg: Message) -> None:
    await stack.service.producer.send(msg, sharding_key=msg.id)


def delayed(id_: str, due_ms: int, body: bytes = BODY, **kw: object) -> Message:
    real = Message(REAL_TOPIC, body, id=id_, **kw)  # type: ignore[arg-type]
    return inner.inner_message(real, due_ms, inner_topic=INNER_TOPIC)


def user_props(m: object) -> dict[str, str]:
    props = dict(m.user_properties)  # type: ignore[attr-defined]
    for added in (DELAY_DUE_AT, DELAY_PUBLISHED_AT):
        props.pop(added, None)
    return props


async def test_round_trip_is_byte_exact_and_keeps_id_keys_tags(stack: DmqStack) -> None:
    id_ = new_uniq_id()
    due = stack.service.delay.now_ms() + 300
    props = {"app": "orders", "unicode": "żółw ✓", "n": "42"}
    await send_inner(stack, delayed(id_, due, tags="TagA", keys=("k1", "k2"), properties=props))
    await stack.received.until(bool)
    (out,) = stack.received.got
    assert out.topic == REAL_TOPIC
    assert out.body == BODY
    assert out.uniq_key == id_
    assert out.tags == "TagA"
    assert out.keys == ("k1", "k2")
    assert user_props(out) == props  # no DMQ_* property leaks, none is lost
    assert int(out.properties[DELAY_DUE_AT]) == due
    assert out.store_timestamp_ms >= due  # never early


async def test_redelivered_inner_message_is_scheduled_once(stack: DmqStack) -> None:
    id_, last = new_uniq_id(), new_uniq_id()
    due = stack.service.delay.now_ms() + 300
    await send_inner(stack, delayed(id_, due))
    await send_inner(stack, delayed(id_, due + 100))  # the same UNIQ_KEY again: a redelivery
    await send_inner(stack, delayed(last, due + 600))  # published after both would have been
    await stack.received.until(lambda got: last in {m.uniq_key for m in got})
    assert stack.received.ids().count(id_) == 1
    assert stack.service.inner.labels("duplicate")._value.get() == 1


async def test_cancel_through_the_inner_topic(stack: DmqStack) -> None:
    cancelled, kept = new_uniq_id(), new_uniq_id()
    due = stack.service.delay.now_ms() + 1500
    await send_inner(stack, delayed(cancelled, due))
    await send_inner(stack, delayed(kept, due + 200))
    cancel = inner.cancel_message(cancelled, inner_topic=INNER_TOPIC)
    await stack.service.producer.send(cancel, sharding_key=cancelled)  # same queue as the message
    await stack.received.until(lambda got: kept in {m.uniq_key for m in got})
    assert cancelled not in stack.received.ids()
    status = stack.service.delay.get(cancelled)
    assert status is not None and status.state is DelayState.CANCELLED


async def test_cancel_that_arrives_before_its_message_is_remembered(stack: DmqStack) -> None:
    early, kept = new_uniq_id(), new_uniq_id()
    due = stack.service.delay.now_ms() + 300
    cancel = inner.cancel_message(early, inner_topic=INNER_TOPIC)
    await stack.service.producer.send(cancel, sharding_key=early)  # reordered: the cancel comes first
    await send_inner(stack, delayed(early, due))
    await send_inner(stack, delayed(kept, due + 200))  # same or later: published after early would be
    await stack.received.until(lambda got: kept in {m.uniq_key for m in got})
    assert early not in stack.received.ids()
    assert stack.service.inner.labels("cancelled_before")._value.get() == 1
    status = stack.service.delay.get(early)
    assert status is not None and status.state is DelayState.CANCELLED


async def test_producer_and_inner_consumer_share_one_client_instance(stack: DmqStack) -> None:
    service = stack.service
    client_id = service.client.client_id
    assert service.producer.client_id == service.consumer.client_id == client_id
    known = service.client.broker_addrs()  # the brokers of the inner topic's routes
    assert known
    for name in known:  # each broker: one client, both groups, on one connection
        broker = stack.cluster.brokers[name]
        assert broker.clients.consumer_ids("dmq_test_group") == [client_id]
        assert broker.clients.producer_ids(service.settings.producer_group) == [client_id]
        assert broker.clients.connections_of(client_id) == 1


async def test_rocketmq5_timer_properties(stack: DmqStack) -> None:
    now = stack.service.delay.now_ms()
    cases = {
        new_uniq_id(): {inner.TIMER_DELIVER_MS: str(now + 400)},
        new_uniq_id(): {inner.TIMER_DELAY_MS: "500"},
        new_uniq_id(): {inner.TIMER_DELAY_SEC: "1"},
    }
    for id_, timer in cases.items():
        props = {inner.REAL_TOPIC: REAL_TOPIC, "k": "v", **timer}
        await send_inner(stack, Message(INNER_TOPIC, BODY, properties=props, id=id_))
    await stack.received.until(lambda got: len(got) == len(cases))
    by_id = {m.uniq_key: m for m in stack.received.got}
    assert set(by_id) == set(cases)
    for id_, timer in cases.items():
        out = by_id[id_]
        assert user_props(out) == {"k": "v"}  # the timer properties are not copied
        assert out.body == BODY
        due = int(out.properties[DELAY_DUE_AT])
        assert out.store_timestamp_ms >= due
        if inner.TIMER_DELIVER_MS in timer:
            assert due == int(timer[inner.TIMER_DELIVER_MS])
        else:
            assert due - now >= (500 if inner.TIMER_DELAY_MS in timer else 1000)


async def test_malformed_inner_message_is_skipped_and_counted(stack: DmqStack) -> None:
    last = new_uniq_id()
    await send_inner(stack, Message(INNER_TOPIC, b"x", properties={"k": "v"}, id=new_uniq_id()))  # no topic
    await send_inner(stack, delayed(last, stack.service.delay.now_ms() + 100))
    await stack.received.until(bool)
    assert stack.received.ids() == [last]
    assert stack.service.inner.labels("malformed")._value.get() == 1


async def test_health_ready_and_metrics(stack: DmqStack) -> None:
    base = f"http://{stack.service.http.host}:{stack.service.http.port}"
    async with httpx.AsyncClient(base_url=base) as client:
        assert (await client.get("/healthz")).status_code == 200
        ready = await client.get("/readyz")
        text = (await client.get("/metrics")).text
    assert ready.status_code == 200, ready.text
    body = ready.json()  # serve's shape, from the same readiness check
    assert body["ready"] is True and body["store"] == "ok" and body["nameServer"] == "reachable"
    assert body["writableBrokers"] and {b["broker"] for b in body["brokers"]} <= set(body["writableBrokers"])
    for name in (
        "rocksidecar_delay_scheduled",
        "rocksidecar_dmq_owned_queues ",
        "rocksidecar_delay_lateness_seconds_bucket",
        "rocksidecar_retry_pending",
    ):
        assert name in text  # fmt: skip
    owned = re.search(r"^rocksidecar_dmq_owned_queues (\S+)$", text, re.M)
    assert owned is not None and float(owned.group(1)) >= 4  # it is the only replica: every inner queue
