"""Review: our queue allocation against faithful ports of rocketmq-client's own Java code.

Each ``java_*`` function below is a line-by-line port of the Java source it names (apache/rocketmq,
client/src/main/java/org/apache/rocketmq/client/consumer/rebalance/*.java,
common/.../consistenthash/ConsistentHashRouter.java, common/.../message/MessageQueue.java,
client/.../impl/consumer/RebalanceImpl.java, client/.../impl/factory/MQClientInstance.java). Our
strategies must give the same share for the same inputs: a mixed group (Java members and ours) computing
different shares consumes a queue twice or leaves one unconsumed.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.consumer.allocate import (
    AllocateStrategy,
    Averagely,
    AveragelyByCircle,
    ByMachineRoom,
    ConsistentHash,
    Environment,
    MachineRoomNearby,
    PrefixMachineRooms,
    md5_hash,
    sort_for_allocation,
)
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.consumer.rebalance import allocate_queues
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.route import TopicRouteData
from tests.rmq.consumer.helpers import Recorder, send_to_queues

Qs = list[MessageQueue]
Cs = list[str]

# --- ports of the Java code -------------------------------------------------------------------------


def _utf16_units(s: str) -> list[int]:
    out: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:  # a Java String stores a non-BMP character as a surrogate pair
            cp -= 0x10000
            out += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            out.append(cp)
    return out


def java_string_compare(a: str, b: str) -> int:
    # java.lang.String.compareTo: the first differing char (UTF-16 code unit), else the length difference
    ua, ub = _utf16_units(a), _utf16_units(b)
    for x, y in zip(ua, ub, strict=False):
        if x != y:
            return x - y
    return len(ua) - len(ub)


def _java_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def java_mq_compare(a: MessageQueue, b: MessageQueue) -> int:
    # MessageQueue.compareTo: topic.compareTo, then brokerName.compareTo, then `this.queueId - o.queueId`
    r = java_string_compare(a.topic, b.topic)
    if r:
        return r
    r = java_string_compare(a.broker_name, b.broker_name)
    if r:
        return r
    return _java_int(a.queue_id - b.queue_id)


def java_rebalance_inputs(
    mq_set: Sequence[MessageQueue], cid_all: Sequence[str]
) -> tuple[list[MessageQueue], list[str]]:
    # RebalanceImpl.rebalanceByTopic (CLUSTERING): mqSet is topicSubscribeInfoTable's Set<MessageQueue>
    # (MQClientInstance.topicRouteData2TopicSubscribeInfo builds a HashSet: duplicates collapse);
    # `mqAll.addAll(mqSet); Collections.sort(mqAll); Collections.sort(cidAll);`
    mq_all = sorted(set(mq_set), key=functools.cmp_to_key(java_mq_compare))
    cids = sorted(cid_all, key=functools.cmp_to_key(java_string_compare))
    return mq_all, cids


def java_check(current: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    # AbstractAllocateMessageQueueStrategy.check
    if not current:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    return current in cid_all  # `if (!cidAll.contains(currentCID)) return false`


def java_averagely(current: str, mq_all: Qs, cid_all: Cs) -> Qs:
    # AllocateMessageQueueAveragely.allocate
    if not java_check(current, mq_all, cid_all):
        return []
    index = cid_all.index(current)  # int index = cidAll.indexOf(currentCID);
    mod = len(mq_all) % len(cid_all)  # int mod = mqAll.size() % cidAll.size();
    if len(mq_all) <= len(cid_all):  # int averageSize = mqAll.size() <= cidAll.size() ? 1 : ...
        average = 1
    elif mod > 0 and index < mod:
        average = len(mq_all) // len(cid_all) + 1
    else:
        average = len(mq_all) // len(cid_all)
    # int startIndex = (mod > 0 && index < mod) ? index * averageSize : index * averageSize + mod;
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    rng = min(average, len(mq_all) - start)  # int range = Math.min(averageSize, mqAll.size() - startIndex);
    return [mq_all[start + i] for i in range(rng)]  # result.add(mqAll.get(startIndex + i));


def java_by_circle(current: str, mq_all: Qs, cid_all: Cs) -> Qs:
    # AllocateMessageQueueAveragelyByCircle.allocate
    if not java_check(current, mq_all, cid_all):
        return []
    index = cid_all.index(current)
    return [mq_all[i] for i in range(index, len(mq_all)) if i % len(cid_all) == index]


def java_md5_hash(key: str) -> int:
    # ConsistentHashRouter.MD5Hash.hash: key.getBytes(UTF_8), h <<= 8; h |= ((int) digest[i]) & 0xFF, i < 4
    digest = hashlib.md5(key.encode("utf-8")).digest()
    h = 0
    for i in range(4):
        h <<= 8
        h |= digest[i] & 0xFF
    return h


def java_consistent_hash(
    current: str, mq_all: Qs, cid_all: Cs, vnodes: int = 10, hash_fn: Callable[[str], int] = java_md5_hash
) -> Qs:
    # AllocateMessageQueueConsistentHash.allocate with ConsistentHashRouter (TreeMap<Long, VirtualNode>)
    if not java_check(current, mq_all, cid_all):
        return []
    ring: dict[int, tuple[str, int]] = {}  # hash -> VirtualNode(physical key, replicaIndex)
    for cid in cid_all:  # for (T pNode : pNodes) addNode(pNode, vNodeCount);
        # getExistingReplicas: counts the ring's VirtualNodes whose physical key equals (the ring's
        # entries, after any put that replaced an earlier node of the same hash)
        existing = sum(1 for key, _ in ring.values() if key == cid)
        for i in range(vnodes):
            # new VirtualNode<>(pNode, i + existingReplicas); ring.put(hash(vNode.getKey()), vNode)
            ring[hash_fn(f"{cid}-{i + existing}")] = (cid, i + existing)
    out: Qs = []
    for mq in mq_all:
        if not ring:  # routeNode: if (ring.isEmpty()) return null;
            continue
        h = hash_fn(f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]")
        tail = [k for k in ring if k >= h]  # ring.tailMap(hashVal)
        node = min(tail) if tail else min(ring)  # tailMap.firstKey() : ring.firstKey()
        if ring[node][0] == current:
            out.append(mq)
    return out


def java_split(s: str, sep: str) -> list[str]:
    # java.lang.String.split(regex) (limit 0) for a one-char non-regex separator: no match gives the whole
    # string; otherwise every piece, then trailing empty strings removed.
    parts = s.split(sep)
    if len(parts) == 1:
        return parts
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def java_by_machine_room(current: str, mq_all: Qs, cid_all: Cs, idcs: frozenset[str]) -> Qs:
    # AllocateMessageQueueByMachineRoom.allocate
    if not java_check(current, mq_all, cid_all):
        return []
    current_index = cid_all.index(current)
    pre = []
    for mq in mq_all:
        temp = java_split(mq.broker_name, "@")  # String[] temp = mq.getBrokerName().split("@");
        if len(temp) == 2 and temp[0] in idcs:  # temp.length == 2 && consumeridcs.contains(temp[0])
            pre.append(mq)
    mod, rem = len(pre) // len(cid_all), len(pre) % len(cid_all)
    out = [pre[i] for i in range(mod * current_index, mod * current_index + mod)]
    if rem > current_index:
        out.append(pre[current_index + mod * len(cid_all)])
    return out


# --- input generators --------------------------------------------------------------------------------

# Case, punctuation, separators, BMP characters above the surrogates, and non-BMP characters (which
# sort after U+FFFF as Python code points but before it as Java's UTF-16 code units).
_ALPHABET = st.sampled_from(
    ["a", "A", "b", "B", "@", "-", " ", "0", "é", "\ue000", "\uffff", "\U00010000", "\U0001f600"]
)
names = st.text(_ALPHABET, min_size=1, max_size=4)
cid_lists = st.lists(names, min_size=1, max_size=6)  # duplicates allowed: two processes of one client id


@st.composite
def queue_lists(draw: st.DrawFn) -> list[MessageQueue]:
    brokers = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    topic = draw(st.sampled_from(["T", "%RETRY%g", "t\U0001f600"]))
    return [
        MessageQueue(topic, b, q) for b in brokers for q in range(draw(st.integers(min_value=1, max_value=5)))
    ]


def _ours(strategy: AllocateStrategy, current: str, mq_set: Qs, cid_all: Cs) -> Qs:
    mqs, cids = sort_for_allocation(mq_set, cid_all)
    return strategy.allocate("g", current, mqs, cids)


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- sound parts: these pass, kept as evidence of what was checked -----------------------------------


@_SETTINGS
@given(st.lists(names, max_size=8))
@example(["\uffff", "\U00010000", "\ue000", "a", "A"])  # Java: U+10000 (D800 DC00) sorts before U+E000
def test_our_sort_is_javas_string_order(cids: list[str]) -> None:
    assert sort_for_allocation([], cids)[1] == java_rebalance_inputs([], cids)[1]


@_SETTINGS
@given(queue_lists(), cid_lists, st.data())
def test_averagely_and_circle_match_java(mq_set: Qs, cid_all: Cs, data: st.DataObject) -> None:
    current = data.draw(st.sampled_from([*cid_all, "not-a-member"]))
    mqs, cids = java_rebalance_inputs(mq_set, cid_all)
    assert _ours(Averagely(), current, mq_set, cid_all) == java_averagely(current, mqs, cids)
    assert _ours(AveragelyByCircle(), current, mq_set, cid_all) == java_by_circle(current, mqs, cids)


@_SETTINGS
@given(st.text(min_size=0, max_size=20))
def test_md5_hash_matches_java(key: str) -> None:
    key = key.encode("utf-8", "replace").decode("utf-8")  # a Java String has no lone surrogates here
    assert md5_hash(key) == java_md5_hash(key)


@_SETTINGS
@given(queue_lists(), cid_lists, st.data())
def test_consistent_hash_with_md5_matches_java(mq_set: Qs, cid_all: Cs, data: st.DataObject) -> None:
    current = data.draw(st.sampled_from(cid_all))
    mqs, cids = java_rebalance_inputs(mq_set, cid_all)
    ours = _ours(ConsistentHash(3), current, mq_set, cid_all)
    assert ours == java_consistent_hash(current, mqs, cids, vnodes=3)


def java_nearby(current: str, mq_all: Qs, cid_all: Cs, inner: Callable[[str, Qs, Cs], Qs]) -> Qs:
    # AllocateMachineRoomNearby.allocate with the resolver of AllocateMachineRoomNearByTest:
    # brokerDeployIn = brokerName.split("-")[0], consumerDeployIn = clientID.split("-")[0]
    if not java_check(current, mq_all, cid_all):
        return []

    def room(s: str) -> str:
        parts = java_split(s, "-")
        if not parts:
            raise IndexError("ArrayIndexOutOfBoundsException")
        if not parts[0]:
            raise ValueError("Machine room is null")
        return parts[0]

    mr2mq: dict[str, Qs] = {}
    for mq in mq_all:
        mr2mq.setdefault(room(mq.broker_name), []).append(mq)
    mr2c: dict[str, Cs] = {}
    for cid in cid_all:
        mr2c.setdefault(room(cid), []).append(cid)
    here = room(current)
    out: Qs = []
    local = mr2mq.pop(here, None)  # mr2Mq.remove(currentMachineRoom)
    if local:
        out += inner(current, local, mr2c[here])  # current is in cidAll: its room is a key
    for r in sorted(mr2mq, key=functools.cmp_to_key(java_string_compare)):  # TreeMap entrySet order
        if r not in mr2c:
            out += inner(current, mr2mq[r], cid_all)
    return out


_ROOMS = st.sampled_from(["r1", "R1", "r\U0001f600", "r\uffff", "b"])
room_names = st.builds(lambda r, n: f"{r}-{n}", _ROOMS, st.sampled_from(["x", "y", "Z"]))


@_SETTINGS
@given(
    st.lists(room_names, min_size=1, max_size=4, unique=True),
    st.lists(room_names, min_size=1, max_size=5),
    st.integers(1, 4),
    st.data(),
)
def test_machine_room_nearby_matches_java(
    brokers: list[str], cid_all: Cs, per: int, data: st.DataObject
) -> None:
    mq_set = [MessageQueue("T", b, q) for b in brokers for q in range(per)]
    current = data.draw(st.sampled_from(cid_all))
    mqs, cids = java_rebalance_inputs(mq_set, cid_all)
    for ours_inner, java_inner in ((Averagely(), java_averagely), (AveragelyByCircle(), java_by_circle)):
        ours = _ours(MachineRoomNearby(ours_inner, PrefixMachineRooms()), current, mq_set, cid_all)
        assert ours == java_nearby(current, mqs, cids, java_inner)


# --- defects ---------------------------------------------------------------------------------------


def test_consistent_hash_with_a_custom_hash_and_a_duplicate_client_id_matches_java() -> None:
    """Java's addNode starts a repeated client id's replicas at getExistingReplicas(), the number of that
    client's virtual nodes *left in the ring*: when two of its points hashed alike (a custom
    HashFunction, which Java's 3-argument constructor takes as ours does) the count is lower than the
    replicas added, so Java re-adds ``cid-<count>``... while ours assumes every replica survived."""

    def small_hash(key: str) -> int:  # a custom HashFunction with a small range: collisions happen
        return java_md5_hash(key) % 5

    mq_set = [MessageQueue("T", "broker-a", q) for q in range(8)]
    cid_all = ["a", "a", "b"]  # one client id twice: two processes started with the same instance name
    mqs, cids = java_rebalance_inputs(mq_set, cid_all)
    for current in ("a", "b"):
        java = java_consistent_hash(current, mqs, cids, vnodes=2, hash_fn=small_hash)
        ours = _ours(ConsistentHash(2, hash_fn=small_hash), current, mq_set, cid_all)
        assert ours == java, current


@pytest.mark.parametrize("broker", ["idc1@broker-a@", "idc1@", "idc1@broker-a@@"])
def test_by_machine_room_splits_broker_names_as_java_does(broker: str) -> None:
    """Java's ``brokerName.split("@")`` drops trailing empty strings ("idc1@b@" is 2 pieces, "idc1@" is 1);
    Python's str.split keeps them, so ours takes or leaves a broker's queues opposite to Java."""
    mq_set = [MessageQueue("T", broker, q) for q in range(4)] + [MessageQueue("T", "idc1@broker-b", 0)]
    cid_all = ["c1", "c2"]
    mqs, cids = java_rebalance_inputs(mq_set, cid_all)
    idcs = frozenset({"idc1"})
    for current in cid_all:
        java = java_by_machine_room(current, mqs, cids, idcs)
        ours = _ours(ByMachineRoom(idcs), current, mq_set, cid_all)
        assert ours == java, current


def test_a_route_naming_a_broker_twice_gives_every_queue_to_exactly_one_member() -> None:
    """Java's topicRouteData2TopicSubscribeInfo puts the readable queues in a HashSet, so a route whose
    queueDatas names a broker twice yields each queue once; ours keeps the duplicates in mq_all and the
    averagely blocks then overlap: two members (ours among themselves, too) consume one queue."""
    route = TopicRouteData.from_json(
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"c"}],'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,"writeQueueNums":2},'
        b'{"brokerName":"broker-a","perm":6,"readQueueNums":4,"writeQueueNums":4}]}'
    )
    mq_all = route.subscribe_queues("T")
    cids = ["c1", "c2"]
    cfg = ConsumerConfig("g", instance_name="x", client_ip="127.0.0.1")
    shares = {cid: allocate_queues(cfg, cid, mq_all, cids) for cid in cids}
    java_mqs, java_cids = java_rebalance_inputs(mq_all, cids)
    java = {cid: set(java_averagely(cid, java_mqs, java_cids)) for cid in cids}
    assert shares == java
    assert not shares["c1"] & shares["c2"]


async def test_a_strategy_failing_on_one_topic_keeps_the_other_topics_rebalancing(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """RebalanceImpl.rebalanceByTopic catches a strategy's exception and returns (that topic's queues
    stay as they were), and doRebalance goes on with the next topic. Ours lets it escape rebalance():
    Environment(3) has no queue in the group's %RETRY% topic (one queue per broker), so start() raises and
    topic T (8 queues) is never consumed, although queue 2 of T is this environment's."""
    cfg = ConsumerConfig(
        "GR-env",
        instance_name="one",
        client_ip="127.0.0.1",
        consume_from=ConsumeFrom.FIRST_OFFSET,
        rebalance_interval_s=600.0,
        allocate=Environment(3),
    )
    consumer = PushConsumer(cfg, cluster.namesrv_addr, Recorder())
    consumer.subscribe("EnvT")
    consumers.append(consumer)
    await send_to_queues(cluster, "EnvT", 1)  # the brokers create the topic: 4 queues each
    await consumer.start()
    expected = sort_for_allocation(consumer._routes["EnvT"].subscribe_queues("EnvT"), [])[0][2]
    assert {mq for mq in consumer.queues if mq.topic == "EnvT"} == {expected}
