"""Review: the producer's queue selection, retries and fault back-off against the Java 4.9.4 client.

The Java algorithms are ported below as reference functions (apache/rocketmq, tag rocketmq-all-4.9.4);
each test compares ours with them. Every test here fails on the code as reviewed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocksidecar.rmq.codes import MASTER_ID, ResponseCode
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.producer.selector import ByShardingKey
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.result import SendStatus
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData
from tests.fakes import send_ok
from tests.rmq.producer.harness import Harness

MSG = Message("T", b"hello")


# --- Java reference ports ----------------------------------------------------------------------------


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def _utf16_units(s: str) -> list[int]:
    """A Java String's chars: UTF-16 code units (a lone surrogate is one unit, as in a Java String)."""
    data = s.encode("utf-16-be", "surrogatepass")
    return [(data[i] << 8) | data[i + 1] for i in range(0, len(data), 2)]


def java_string_hash_code(s: str) -> int:
    """java.lang.String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 chars, in int arithmetic."""
    h = 0
    for c in _utf16_units(s):
        h = _int32(31 * h + c)
    return h


def java_string_compare_to(a: str, b: str) -> int:
    """java.lang.String.compareTo: lexicographic over UTF-16 code units, then length."""
    ua, ub = _utf16_units(a), _utf16_units(b)
    for x, y in zip(ua, ub, strict=False):
        if x != y:
            return x - y
    return len(ua) - len(ub)


def java_trunc_rem(a: int, n: int) -> int:
    """Java's int % (the sign of the dividend)."""
    r = abs(a) % n
    return -r if a < 0 else r


def java_select_by_hash(mqs: list[MessageQueue], key: str) -> MessageQueue:
    """SelectMessageQueueByHash.select (4.9.4, lines 27-33):
    value = arg.hashCode() % mqs.size(); if (value < 0) value = Math.abs(value); return mqs.get(value)."""
    value = java_trunc_rem(java_string_hash_code(key), len(mqs))
    if value < 0:
        value = abs(value)
    return mqs[value]


def java_publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """MQClientInstance.topicRouteData2TopicPublishInfo (4.9.4, lines 161-208), the non-order branch:
    Collections.sort(qds) (a stable merge sort by QueueData.compareTo = brokerName.compareTo, i.e. Java
    String order over UTF-16 units); PermName.isWriteable; the first BrokerData of the name; MASTER_ID in
    its addresses; writeQueueNums queues each."""
    import functools

    def compare(x: QueueData, y: QueueData) -> int:
        return java_string_compare_to(x.broker_name, y.broker_name)

    qds = sorted(route.queue_datas, key=functools.cmp_to_key(compare))
    out: list[MessageQueue] = []
    for qd in qds:
        if (qd.perm & 2) != 2:
            continue
        bd = next((b for b in route.broker_datas if b.broker_name == qd.broker_name), None)
        if bd is None or MASTER_ID not in bd.broker_addrs:
            continue
        out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return out


# --- Findings ------------------------------------------------------------------------------------------


def _stored_then(second: str, harness: Harness) -> None:
    """Both brokers: the first SEND answers FLUSH_DISK_TIMEOUT (stored on the master, not yet flushed);
    every later one answers as ``second`` says (whichever broker the round robin starts on)."""
    calls = {"n": 0}

    def reply(cmd: RemotingCommand) -> RemotingCommand:
        calls["n"] += 1
        if calls["n"] == 1:
            resp = send_ok(cmd, 41)
            resp.code = ResponseCode.FLUSH_DISK_TIMEOUT
            if second == "budget":
                harness.timer.advance(5.0)  # the whole 3 s budget spent by this (stored) attempt
            return resp
        if second == "budget":
            return send_ok(cmd, 42)
        code = ResponseCode.SYSTEM_ERROR if second == "system_error" else ResponseCode.MESSAGE_ILLEGAL
        return cmd.response(code, "injected")

    harness.behaviour["broker-a"] = reply
    harness.behaviour["broker-b"] = reply


@pytest.mark.parametrize("second", ["system_error", "message_illegal", "budget"])
async def test_stored_not_ok_result_is_returned_when_the_retry_on_another_broker_fails(second: str) -> None:
    """DefaultMQProducerImpl.sendDefaultImpl (4.9.4): a SYNC result that is not SEND_OK, with
    retryAnotherBrokerWhenNotStoreOK, ``continue``s (lines 584-588) but stays in ``sendResult``. If the next
    try throws a retried error (RemotingException/MQClientException, lines 594-607, or a retried broker
    code, 614-615) the loop ends and ``if (sendResult != null) return sendResult;`` (635-637) returns the
    stored result; a broker code that is not retried returns it too (617-619); so does a spent budget
    (callTimeout break at 570-572, then 635-637 before the RemotingTooMuchRequestException at 648).
    Ours forgets the stored result and raises SendFailed: the message IS on broker 1, yet the caller is
    told it failed (spooled and sent again: a duplicate) or, for MESSAGE_ILLEGAL, told it is final (422,
    "nothing kept") although it was stored."""
    h = Harness()
    _stored_then(second, h)
    p = h.producer(retry_another_broker_when_not_store_ok=True)
    result = await p.send(MSG)  # ours: raises SendFailed
    assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert len(h.sent_to()) == (1 if second == "budget" else 3 if second == "system_error" else 2)


def test_sharding_key_with_a_lone_surrogate_hashes_as_java_string_hashcode() -> None:
    """Java's String.hashCode hashes any String, a lone surrogate being one UTF-16 char: "\\ud800" hashes
    to 0xD800 = 55296, so SelectMessageQueueByHash picks queue 55296 % 8 = 0. Ours encodes the key to
    UTF-16 strictly (rmq/broker.py java_string_hash) and raises UnicodeEncodeError, a bare Python error
    (not a RocketMQError) out of Producer.send for a library caller. (The HTTP/gRPC API refuses such a
    key first, app/request.py _check_utf8, so only a library caller meets it.)"""
    key = "a\ud800"
    assert java_string_hash_code(key) == 31 * 97 + 0xD800
    assert ByShardingKey(key).index(8) == (31 * 97 + 0xD800) % 8  # ours: UnicodeEncodeError


async def test_send_with_lone_surrogate_sharding_key_raises_a_rocketmq_error_or_sends() -> None:
    """The same through Producer.send: Java would send to queue hash % n; ours raises UnicodeEncodeError
    from inside with_retries (the selector runs outside its try), neither a result nor SendFailed."""
    h = Harness()
    p = h.producer()
    result = await p.send(MSG, sharding_key="\udc00")  # ours: UnicodeEncodeError
    assert result.status is SendStatus.SEND_OK
    expected = java_select_by_hash(
        [MessageQueue("T", b, i) for b in ("broker-a", "broker-b") for i in range(4)], "\udc00"
    )
    assert h.sent_to() == [(expected.broker_name, expected.queue_id)]


def test_publish_queue_order_is_java_string_order_for_non_bmp_broker_names() -> None:
    """topicRouteData2TopicPublishInfo sorts queueDatas with QueueData.compareTo, brokerName.compareTo:
    Java String order over UTF-16 code units, where a supplementary character (a surrogate pair,
    0xD800-0xDBFF first unit) sorts before U+E000..U+FFFF. Ours sorts by Python code point
    (rmq/route.py publish_queues, ``sorted(..., key=lambda q: q.broker_name)``), so for such broker names
    the queue list is in another order than Java's, and a sharding key then reaches another queue than a
    Java producer's with the same key (the README's promise for ``shardingKey``)."""
    a, b = "\uff21-broker", "\U0001f600-broker"  # FULLWIDTH A vs an emoji
    route = TopicRouteData(
        (QueueData(a, 2, 2, 6), QueueData(b, 2, 2, 6)),
        (BrokerData("c", a, {0: "a:10911"}), BrokerData("c", b, {0: "b:10911"})),
    )
    assert route.publish_queues("T") == java_publish_queues("T", route)


_names = st.sampled_from(["broker-a", "broker-b", "b", "\uff42", "\U0001d41b", "\ue000x", "\U00010000"])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(_names, st.integers(0, 6), st.integers(-8, 15), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12),
)
def test_sharding_key_picks_javas_queue_on_any_route(
    rows: list[tuple[str, int, int, bool]], key: str
) -> None:
    """End to end, route -> publish queues -> SelectMessageQueueByHash: ours picks Java's queue for every
    route (duplicate names, unwritable perms, brokers without a master) and key. Fails only through the
    broker-name order above (non-BMP vs U+E000-U+FFFF names)."""
    queue_datas = tuple(QueueData(n, w, w, perm) for n, w, perm, _ in rows)
    broker_datas = tuple(
        BrokerData("c", n, {MASTER_ID: "h:1"} if master else {1: "h:2"}) for n, _, _, master in rows
    )
    route = TopicRouteData(queue_datas, broker_datas)
    ours = route.publish_queues("T")
    java = java_publish_queues("T", route)
    assert ours == java
    if java:
        assert ours[ByShardingKey(key).index(len(ours))] == java_select_by_hash(java, key)
