"""A strategy beyond Java's: rendezvous hashing with bounded loads, for groups of rocksidecars only.

Every queue ranks the clients by an MD5 score of (queue, client); pairs are taken best score first, and a
client stops taking queues at its share (``m // n``, one more for the first ``m % n`` clients that reach
it). So the result is exactly balanced, like AllocateMessageQueueAveragely, while most queues stay with
the client that scores best for them, so a change of members moves few queues besides the leaver's.

Why not exactly the minimum: no allocation that is a function of the member set alone can be both
balanced and minimal for every departure. Minimal departures mean a queue's owner in a set S keeps it in
every subset of S that still contains it, down to pairs; so the owner must beat every other member in
the pairwise contests, which makes each queue's preference a fixed ranking, i.e. plain rendezvous hashing,
whose loads are random rather than balanced. Balance costs some extra moves; the bench measures how many
(bench/allocation.py). Every member must run this strategy: mixed with Java clients the shares overlap.
rmq/consumer/sticky.py adds the shared state (what each member holds) and reaches both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from ..message import MessageQueue
from ..route import java_string_key
from .allocate import (
    CheckedStrategy,
    Clients,
    Queues,
    java_queue_string,
)


def rendezvous_score(queue_key: str, cid: str) -> int:
    """How much ``cid`` wants the queue: the higher, the earlier it is offered to it."""
    return int.from_bytes(hashlib.md5(f"{queue_key}|{cid}".encode()).digest()[:8], "big")


def deal(
    free: Sequence[MessageQueue],
    cids: Sequence[str],
    owner: dict[MessageQueue, str],
    quota: dict[str, int],
    floor: int,
    spare: int,
) -> dict[MessageQueue, str]:
    """Hands the ``free`` queues to ``cids`` (sorted by Java string key), pairs best score first, each
    member up to its ``quota``; ``spare`` members still at ``floor`` may take one more, the first to get
    there first. ``owner`` holds the queues already placed; it is completed and returned."""
    load = dict.fromkeys(cids, 0)
    for cid in owner.values():
        load[cid] += 1
    keys = [java_queue_string(mq) for mq in free]
    pairs = sorted(
        (
            (rendezvous_score(key, cid), java_string_key(cid), i, cid)
            for i, key in enumerate(keys)
            for cid in cids
        ),
        reverse=True,
    )
    for _, _, i, cid in pairs:
        mq = free[i]
        if mq in owner:
            continue
        if load[cid] >= quota[cid]:
            if spare == 0 or load[cid] > floor:
                continue
            quota[cid] += 1
            spare -= 1
        owner[mq] = cid
        load[cid] += 1
    return owner


def bounded_assignment(mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> dict[MessageQueue, str]:
    """The whole group's assignment: every queue to exactly one client, loads differing by at most one."""
    cids = sorted(set(cid_all), key=java_string_key)
    if not cids:
        return {}
    floor, extra = divmod(len(mq_all), len(cids))
    return deal(mq_all, cids, {}, dict.fromkeys(cids, floor), floor, extra)


class BoundedHash(CheckedStrategy):
    name = "BOUNDED_HASH"

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        owner = bounded_assignment(mq_all, cid_all)
        return [mq for mq in mq_all if owner.get(mq) == current]


def moved(before: Mapping[MessageQueue, str], after: Mapping[MessageQueue, str]) -> int:
    """How many queues change owner (each one rebuilds a process queue and may redeliver)."""
    return sum(1 for mq, cid in after.items() if before.get(mq) != cid)
