"""Queue allocation strategies, computed exactly as rocketmq-client 4.9.4 computes them.

Every member of a consumer group runs the same strategy on the same inputs (all queues of a topic and
all client ids of the group, both sorted as Java's RebalanceImpl sorts them) and keeps its own share, so
results must match Java's bit for bit or a mixed group would overlap or leave queues unconsumed. The
tests compare each strategy with the output of Java's own classes (tools/java/AllocationVectors.java).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..message import MessageQueue
from ..route import java_string_key

Queues = Sequence[MessageQueue]  # Java's mqAll
Clients = Sequence[str]  # Java's cidAll: client ids


class AllocateStrategy(Protocol):
    name: str

    def allocate(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]: ...


def java_queue_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    """MessageQueue.compareTo: topic, then broker name, then queue id."""
    return java_string_key(mq.topic), java_string_key(mq.broker_name), mq.queue_id


def sort_for_allocation(
    mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> tuple[list[MessageQueue], list[str]]:
    """Both lists sorted as RebalanceImpl does before it calls a strategy."""
    return sorted(mq_all, key=java_queue_key), sorted(cid_all, key=java_string_key)


def java_split(text: str, sep: str) -> list[str]:
    """Java's ``text.split(sep)`` for a one-character separator that is no regex metacharacter: the
    whole text when ``sep`` is absent, else the pieces without the trailing empty ones ("a@b@" gives
    2, "a@" gives 1, "@" gives none), where Python's str.split keeps them."""
    parts = text.split(sep)
    if len(parts) == 1:
        return parts
    while parts and not parts[-1]:
        parts.pop()
    return parts


def java_queue_string(mq: MessageQueue) -> str:
    """MessageQueue.toString(), the key the consistent-hash strategy hashes."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def _check(current: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    # AbstractAllocateMessageQueueStrategy.check: bad input raises; a client not (yet) in the list
    # gets nothing, which happens while the broker has not seen its first heartbeat.
    if not current:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    return current in cid_all


class CheckedStrategy:
    """The argument checks of AbstractAllocateMessageQueueStrategy, then the strategy's own share."""

    name = "ABSTRACT"

    def allocate(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        if not _check(current, mq_all, cid_all):
            return []
        return self.share(group, current, mq_all, cid_all)

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        raise NotImplementedError


class Averagely(CheckedStrategy):
    """AllocateMessageQueueAveragely: contiguous blocks, the first ``len % n`` clients one larger."""

    name = "AVG"

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        index = list(cid_all).index(current)
        m, n = len(mq_all), len(cid_all)
        mod = m % n
        bigger = mod > 0 and index < mod  # the first ``mod`` clients take one queue more
        size = 1 if m <= n else m // n + int(bigger)
        start = index * size if bigger else index * size + mod
        return [mq_all[(start + i) % m] for i in range(min(size, m - start))]


class AveragelyByCircle(CheckedStrategy):
    """AllocateMessageQueueAveragelyByCircle: queue i goes to client i mod n."""

    name = "AVG_BY_CIRCLE"

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        index, n = list(cid_all).index(current), len(cid_all)
        return [mq_all[i] for i in range(index, len(mq_all)) if i % n == index]


def md5_hash(key: str) -> int:
    """ConsistentHashRouter's MD5Hash: the digest's first four bytes as an unsigned number."""
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


class ConsistentHash(CheckedStrategy):
    """AllocateMessageQueueConsistentHash: each client is ``virtual_nodes`` points ``cid-i`` on an
    MD5 ring (a TreeMap, so a later point with the same hash replaces an earlier one); a queue belongs to
    the first point at or after its own hash, wrapping around."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10, hash_fn: Callable[[str], int] = md5_hash) -> None:
        if virtual_nodes < 0:
            raise ValueError(f"illegal virtualNodeCnt :{virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self._hash = hash_fn

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        ring: dict[int, str] = {}
        # Points each id owns in the ring now. A duplicate id (two processes with one client id) numbers
        # its points from this count, as addNode's getExistingReplicas() does: points a later one of the
        # same hash replaced (a custom hash_fn can collide) are not counted, so their numbers are reused.
        owned: dict[str, int] = {}
        for cid in cid_all:
            first = owned.get(cid, 0)
            for i in range(first, first + self.virtual_nodes):
                h = self._hash(f"{cid}-{i}")
                replaced = ring.get(h)
                if replaced is not None:
                    owned[replaced] -= 1
                ring[h] = cid
                owned[cid] = owned.get(cid, 0) + 1
        if not ring:
            return []
        points = sorted(ring)
        out = []
        for mq in mq_all:
            at = bisect.bisect_left(points, self._hash(java_queue_string(mq)))
            if ring[points[at % len(points)]] == current:
                out.append(mq)
        return out


@dataclass
class ByConfig:
    """AllocateMessageQueueByConfig: the configured queues, whatever the group looks like."""

    queues: list[MessageQueue]
    name: str = "CONFIG"

    def allocate(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        return list(self.queues)


@dataclass
class ByMachineRoom(CheckedStrategy):
    """AllocateMessageQueueByMachineRoom: queues of brokers named ``idc@name`` in ``consumer_idcs``,
    dealt out in blocks with the remainder one each to the first clients."""

    consumer_idcs: frozenset[str]
    name: str = "MACHINE_ROOM"

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        index, n = list(cid_all).index(current), len(cid_all)
        mine = [
            mq
            for mq in mq_all
            if len(parts := java_split(mq.broker_name, "@")) == 2 and parts[0] in self.consumer_idcs
        ]
        size, rem = divmod(len(mine), n)
        out = mine[size * index : size * index + size]
        if rem > index:
            out.append(mine[index + size * n])
        return out


class MachineRoomResolver(Protocol):
    def broker_deploy_in(self, mq: MessageQueue) -> str: ...

    def consumer_deploy_in(self, client_id: str) -> str: ...


class PrefixMachineRooms:
    """The machine room is the text before the first ``-`` of a broker name or client id (the
    resolver of rocketmq-client's own tests; name clients ``room-...`` with an instance name)."""

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split("-", 1)[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split("-", 1)[0]


T = TypeVar("T")


def _by_room(items: Sequence[T], room_of: Callable[[T], str], what: Callable[[T], str]) -> dict[str, list[T]]:
    out: dict[str, list[T]] = {}
    for item in items:
        room = room_of(item)
        if not room:
            raise ValueError(f"Machine room is null for {what(item)}")
        out.setdefault(room, []).append(item)
    return out


class MachineRoomNearby(CheckedStrategy):
    """AllocateMachineRoomNearby: queues of a room go to that room's clients by the inner strategy;
    queues of a room without clients are shared by every client."""

    def __init__(self, inner: AllocateStrategy, resolver: MachineRoomResolver) -> None:
        self.inner = inner
        self.resolver = resolver
        self.name = f"MACHINE_ROOM_NEARBY-{inner.name}"

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        room_queues = _by_room(
            mq_all, self.resolver.broker_deploy_in, lambda mq: f"mq {java_queue_string(mq)}"
        )
        room_clients = _by_room(cid_all, self.resolver.consumer_deploy_in, lambda cid: f"consumer id {cid}")
        here = self.resolver.consumer_deploy_in(current)
        out: list[MessageQueue] = []
        local = room_queues.pop(here, None)
        if local:
            out.extend(self.inner.allocate(group, current, local, room_clients.get(here, [])))
        for room in sorted(room_queues, key=java_string_key):  # Java iterates a TreeMap
            if room not in room_clients:
                out.extend(self.inner.allocate(group, current, room_queues[room], cid_all))
        return out


@dataclass
class Environment:
    """Environment isolation (seed 002): environment N (1-based) consumes queue N-1 of the sorted queues
    and nothing else, so test environments sharing one topic never consume each other's messages. The
    producer side sends environment N's messages to queue N-1."""

    env_index: int
    name: str = "ENVIRONMENT"

    def __post_init__(self) -> None:
        if self.env_index < 1:
            raise ValueError(f"the environment index is 1-based, got {self.env_index}")

    def allocate(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        if self.env_index > len(mq_all):
            raise ValueError(f"environment {self.env_index} has no queue: the topic has {len(mq_all)}")
        return [mq_all[self.env_index - 1]]
