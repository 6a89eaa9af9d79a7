"""A balanced and minimal-movement allocation for groups of rocksidecars: sticky, from shared holdings.

BoundedHash shows (rmq/consumer/bounded_hash.py) that no allocation computed from the member set alone can
be balanced and minimal for every change; this one also reads what every member holds now (its
ConsumerRunningInfo, asked through the broker with GET_CONSUMER_RUNNING_INFO: rmq/consumer/holdings.py),
and computes the whole group's assignment from (sorted members, their holdings) alone:

1. Holdings are cleaned: only queues of the topic, only current members; a queue claimed by several
   members goes to the claimant that scores best for it (the rendezvous score of BoundedHash).
2. Quotas: ``m // n`` each; the ``m % n`` one-larger quotas go first to members already holding more
   than ``m // n`` (by client id if too many do), the rest as BoundedHash hands them out.
3. Each member keeps its best-scoring holdings up to its quota; the rest (surplus of members over quota,
   and queues nobody holds, such as a leaver's) is dealt out by BoundedHash's rule, pairs best score first,
   to members under quota.

So a member that leaves a balanced group moves exactly its own queues, a member that joins takes exactly
its quota, the result is always balanced, and with no holdings at all it is BoundedHash's assignment. A
balanced assignment without overlap or gap is a fixed point: members computing at different moments from
snapshots that already show it compute it again; tests/rmq/consumer/test_sticky.py checks that
interleaved rebalances on stale snapshots reach it. When some member's holdings cannot be read, a
rebalance computes from none, i.e. BoundedHash (rmq/consumer/holdings.py says why). Every member must
run this strategy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from ..message import MessageQueue
from ..route import java_string_key
from .allocate import (
    CheckedStrategy,
    Clients,
    Queues,
    java_queue_string,
)
from .bounded_hash import deal
from .bounded_hash import rendezvous_score as _score

Holdings = Mapping[str, Set[MessageQueue]]


def _claims(mq_all: Sequence[MessageQueue], cids: list[str], holdings: Holdings) -> dict[MessageQueue, str]:
    """Each held queue of the topic to one current member: the best-scoring claimant."""
    keys = {mq: java_queue_string(mq) for mq in mq_all}
    owner: dict[MessageQueue, str] = {}
    for cid in cids:
        for mq in holdings.get(cid, ()):
            if mq not in keys:
                continue
            other = owner.get(mq)
            if other is None or (_score(keys[mq], cid), java_string_key(cid)) > (
                _score(keys[mq], other),
                java_string_key(other),
            ):
                owner[mq] = cid
    return owner


def sticky_assignment(
    mq_all: Sequence[MessageQueue], cid_all: Sequence[str], holdings: Holdings
) -> dict[MessageQueue, str]:
    """The whole group's assignment: every queue to one member, loads differing by at most one, and as
    many queues as balance allows left with the member holding them."""
    cids = sorted(set(cid_all), key=java_string_key)
    if not cids:
        return {}
    keys = {mq: java_queue_string(mq) for mq in mq_all}
    claimed = _claims(mq_all, cids, holdings)
    held: dict[str, list[MessageQueue]] = {cid: [] for cid in cids}
    for mq in mq_all:  # in the topic's order, so the lists do not depend on set iteration
        if mq in claimed:
            held[claimed[mq]].append(mq)
    floor, extra = divmod(len(keys), len(cids))
    # The +1 quotas go first to members already holding quota+1 (by client id when too many do); any
    # left are taken in the dealing by the first members to reach the floor, as BoundedHash does.
    full = sorted((c for c in cids if len(held[c]) > floor), key=java_string_key)[:extra]
    quota = {cid: floor + (1 if cid in full else 0) for cid in cids}
    owner: dict[MessageQueue, str] = {}
    for cid in cids:
        best = sorted(held[cid], key=lambda mq: _score(keys[mq], cid), reverse=True)
        for mq in best[: quota[cid]]:
            owner[mq] = cid
    return deal([mq for mq in keys if mq not in owner], cids, owner, quota, floor, extra - len(full))


class AllocateSticky(CheckedStrategy):
    """The strategy object: ``knowing(holdings)`` gives one that computes from those holdings (the push
    consumer reads them before every rebalance); without holdings it is BoundedHash."""

    name = "STICKY"

    def __init__(self, holdings: Holdings | None = None, *, timeout_s: float = 2.0) -> None:
        """``timeout_s``: how long a rebalance waits for each member's holdings."""
        if timeout_s <= 0:
            raise ValueError(f"the holdings timeout must be positive, got {timeout_s}")
        self.holdings: Holdings = holdings or {}
        self.timeout_s = timeout_s

    def knowing(self, holdings: Holdings) -> AllocateSticky:
        return AllocateSticky(holdings, timeout_s=self.timeout_s)

    def share(self, group: str, current: str, mq_all: Queues, cid_all: Clients) -> list[MessageQueue]:
        owner = sticky_assignment(mq_all, cid_all, self.holdings)
        return [mq for mq in mq_all if owner.get(mq) == current]
