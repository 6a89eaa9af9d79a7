"""Queue selectors (P7) and batch sends (P8) through the producer."""

from __future__ import annotations

import random

import pytest

from rocksidecar.rmq.broker import java_string_hash
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.errors import ClientError, InvalidMessageError, SendFailed
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.message_codec import decode_batch
from rocksidecar.rmq.producer import EnvironmentQueue, PreferZone, RandomQueue, RoundRobin
from rocksidecar.rmq.producer.fault import LatencyFaultTolerance
from rocksidecar.rmq.producer.publish_info import SendIndex, TopicPublishInfo
from rocksidecar.rmq.result import SendResult
from tests.fakes import FakeClock, route
from tests.rmq.producer.harness import Harness


def info(brokers: dict[str, int]) -> TopicPublishInfo:
    return TopicPublishInfo.build("T", route(brokers), SendIndex(0))


async def test_sharding_key_always_reaches_the_same_queue_like_java() -> None:
    h = Harness()
    p = h.producer()
    for key in ("order-1", "order-2", "客户-9"):
        h.invoker.calls.clear()
        for _ in range(5):
            await p.send(Message("T", b"x"), sharding_key=key)
        queues = set(h.sent_to())
        assert len(queues) == 1
        expected = info({"broker-a": 4, "broker-b": 4}).queues[abs(java_string_hash(key)) % 8]
        assert queues == {(expected.broker_name, expected.queue_id)}


async def test_ordered_messages_fail_instead_of_moving() -> None:
    h = Harness()
    key = next(
        k
        for k in (f"k{i}" for i in range(100))
        if info({"broker-a": 4, "broker-b": 4}).queues[abs(java_string_hash(k)) % 8].broker_name == "broker-a"
    )
    h.fail("broker-a")
    with pytest.raises(SendFailed) as failed:
        await h.producer().send(Message("T", b"x"), sharding_key=key)
    assert {a.broker for a in failed.value.attempts} == {"broker-a"}
    assert len({(a.broker, a.queue_id) for a in failed.value.attempts}) == 1


def test_environment_n_uses_queue_n_minus_1() -> None:
    i = info({"broker-a": 2, "broker-b": 2})
    assert EnvironmentQueue(1).select(i, None) == MessageQueue("T", "broker-a", 0)
    assert EnvironmentQueue(3).select(i, "broker-b") == MessageQueue("T", "broker-b", 0)
    with pytest.raises(ClientError, match=r"environment 5 needs queue 4.*only 4"):
        EnvironmentQueue(5).select(i, None)
    with pytest.raises(ClientError):
        EnvironmentQueue(0)


async def test_environment_selector_through_the_producer() -> None:
    h = Harness()
    p = h.producer(selector="environment", environment_index=6)
    for _ in range(3):
        await p.send(Message("T", b"x"))
    assert set(h.sent_to()) == {("broker-b", 1)}


def test_zone_preference_falls_back_when_the_zone_is_unavailable() -> None:
    clock = FakeClock()
    fault = LatencyFaultTolerance(clock=clock)
    i = info({"bj-broker-a": 2, "sh-broker-b": 2, "sh-broker-c": 2})
    sel = PreferZone("sh", fault)
    assert {sel.select(i, None).broker_name for _ in range(12)} == {"sh-broker-b", "sh-broker-c"}
    fault.update("sh-broker-b", 0.001, isolation=True)
    fault.update("sh-broker-c", 0.001, isolation=True)
    assert {sel.select(i, None).broker_name for _ in range(6)} == {"bj-broker-a"}


def test_random_selector_avoids_the_last_broker_and_backing_off_ones() -> None:
    fault = LatencyFaultTolerance(clock=FakeClock())
    sel = RandomQueue(fault, random.Random(3))
    i = info({"a": 4, "b": 4, "c": 4})
    picks = {sel.select(i, None) for _ in range(200)}
    assert len(picks) == 12  # every queue, over enough draws
    fault.update("c", 0.6, isolation=False)
    assert {sel.select(i, "a").broker_name for _ in range(50)} == {"b"}


def test_round_robin_takes_one_send_index_a_selection_as_javas_select_one_message_queue() -> None:
    # Java's selectOneMessageQueue takes sendWhichQueue once and walks from it: a skipped queue does not
    # move the index further. Queues a0 a1 b0 b1 c0 c1, index from 0.
    clock = FakeClock()
    fault = LatencyFaultTolerance(clock=clock)
    i = info({"a": 2, "b": 2, "c": 2})
    sel = RoundRobin(fault)
    picked = [sel.select(i, None) for _ in range(3)]
    assert [(q.broker_name, q.queue_id) for q in picked] == [("a", 0), ("a", 1), ("b", 0)]
    fault.update("b", 0.6, isolation=False)  # b backs off: index 3 (b1) moves on to c0
    assert (sel.select(i, None).broker_name, sel.select(i, None).queue_id) == ("c", 0)  # 3 -> c0, 4 -> c0
    assert (sel.select(i, "c").broker_name, sel.select(i, "a").broker_name) == ("a", "c")  # 5, 6
    assert sel.select(i, None) == i.queues[7 % 6]  # one index a selection, whatever it skipped
    assert i.index.next() == 8


def test_round_robin_when_everything_backs_off_still_picks_one_avoiding_the_last() -> None:
    fault = LatencyFaultTolerance(clock=FakeClock(), rng=random.Random(0))
    i = info({"a": 2, "b": 2})
    fault.update("a", 0.001, isolation=True)
    fault.update("b", 0.001, isolation=True)
    sel = RoundRobin(fault)
    assert sel.select(i, "a").broker_name == "b"
    assert sel.select(i, "b").broker_name == "a"


async def test_batch_groups_by_queue_and_reports_each_message() -> None:
    h = Harness()
    p = h.producer()
    msgs = [Message("T", f"m{i}".encode()) for i in range(5)]
    msgs.insert(2, Message("T", b"", tags="bad"))  # an empty body fails only itself
    keys: list[str | None] = [None] * 6
    keys[4] = keys[5] = "order-7"
    out = await p.send_batch(msgs, keys)
    assert isinstance(out[2], InvalidMessageError) and out[2].field == "body"
    ok = [o for o in out if isinstance(o, SendResult)]
    assert len(ok) == 5
    batches = h.invoker.sends()
    assert len(batches) == 2 and all(cmd.ext_fields["m"] == "true" for _, cmd, _ in batches)
    unkeyed = [out[i] for i in (0, 1, 3)]
    assert len({r.queue for r in unkeyed}) == 1  # type: ignore[union-attr]
    assert [r.queue_offset for r in unkeyed] == [0, 1, 2]  # type: ignore[union-attr]
    assert len({r.msg_id for r in ok}) == 5


async def test_batch_is_split_by_size_and_count() -> None:
    h = Harness()
    p = h.producer(max_batch_messages=3, max_batch_bytes=10_000)
    msgs = [Message("T", b"x" * 3000) for _ in range(7)]
    out = await p.send_batch(msgs)
    assert all(isinstance(o, SendResult) for o in out)
    sizes = sorted(len(cmd.body) // 3000 for _, cmd, _ in h.invoker.sends())
    assert sizes == [1, 3, 3]


def _batch_case(topics: str, keys: list[str | None], body: int) -> tuple[list[Message], list[str | None]]:
    """One message per key, with fixed 32-character ids, topics taken in turn from ``topics``."""
    msgs = [Message(topics[i % len(topics)], b"%d" % i * body, id=f"ID{i:030d}") for i in range(len(keys))]
    return msgs, keys


@pytest.mark.parametrize(
    ("topics", "keys", "body", "config"),
    [
        ("T", [None] * 5, 1, {}),  # one topic, no keys, one chunk
        ("T", [None] * 7, 3000, {"max_batch_messages": 3, "max_batch_bytes": 10_000}),
        ("T", [None] * 4, 100, {"max_batch_bytes": 947}),  # 4 x 237 bytes: one byte short
        ("T", [None] * 4, 100, {"max_batch_bytes": 948}),  # exactly enough
        ("T", [None] * 4, 100, {"max_batch_messages": 4}),
        ("T", [None] * 5, 100, {"max_batch_messages": 4}),
        ("T", [None, "k1", None, "k2", "k1"], 10, {}),
        ("T", ["k1", "k1", "k1"], 10, {}),  # one key: one group, the whole batch
        ("TU", [None] * 6, 10, {}),
        ("TU", [None, "k1", None, "k1"], 10, {}),
    ],
)
async def test_a_validated_batch_goes_out_as_the_same_requests_as_an_unvalidated_one(
    topics: str, keys: list[str | None], body: int, config: dict[str, int]
) -> None:
    # validated=True takes the shortcuts of the usual batch (one topic, no keys, one chunk); what goes
    # to which queue, in which requests, and what each message is told must not change.
    seen = []
    for validated in (False, True):
        h = Harness(routes={"T": route({"broker-a": 4, "broker-b": 4}), "U": route({"broker-a": 2})})
        msgs, ks = _batch_case(topics, keys, body)
        out = await h.producer(**config).send_batch(msgs, ks, validated=validated)
        requests = [
            (addr, cmd.ext_fields["b"], cmd.ext_fields["e"], [r.body for r in decode_batch(cmd.body)])
            for addr, cmd, _ in h.invoker.sends()
        ]
        results = [(r.msg_id, r.queue, r.queue_offset) for r in out if isinstance(r, SendResult)]
        assert len(results) == len(msgs)
        seen.append((requests, results))
    assert seen[0] == seen[1]


async def test_batch_retries_on_another_broker_and_reports_failures() -> None:
    h = Harness()
    h.fail("broker-a")
    out = await h.producer().send_batch([Message("T", b"a"), Message("T", b"b")])
    assert all(isinstance(o, SendResult) and o.queue.broker_name == "broker-b" for o in out)
    h.fail("broker-b", ResponseCode.MESSAGE_ILLEGAL)
    out = await h.producer().send_batch([Message("T", b"a")])
    assert isinstance(out[0], SendFailed)
