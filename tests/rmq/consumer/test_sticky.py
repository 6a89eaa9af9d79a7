"""Sticky allocation from the members' holdings: balanced, minimal movement, convergent (issue 13)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from rocksidecar.rmq.consumer.bounded_hash import bounded_assignment, moved
from rocksidecar.rmq.consumer.sticky import AllocateSticky, sticky_assignment
from rocksidecar.rmq.message import MessageQueue

SEED_QUEUES = [MessageQueue("TopicTest", f"broker-{'ab'[i % 2]}", i // 2) for i in range(24)]


def _holdings(owner: Mapping[MessageQueue, str]) -> dict[str, set[MessageQueue]]:
    out: dict[str, set[MessageQueue]] = {}
    for mq, cid in owner.items():
        out.setdefault(cid, set()).add(mq)
    return out


def _random_ids(rng: random.Random, n: int) -> list[str]:
    ids: set[str] = set()
    while len(ids) < n:
        ids.add(
            f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}@{rng.randint(1, 99999)}"
        )
    return sorted(ids)


def test_seed_003_every_leaver_moves_exactly_its_six_queues_and_ends_8_8_8() -> None:
    rng = random.Random(3)
    groups = [["192.168.0.1@1001#1", "192.168.0.2@1002#2", "192.168.0.3@1003#3", "192.168.0.4@1004#4"]]
    groups += [_random_ids(rng, 4) for _ in range(300)]
    for cids in groups:
        before = sticky_assignment(SEED_QUEUES, cids, {})
        assert sorted(Counter(before.values()).values()) == [6, 6, 6, 6]
        for gone in cids:
            after = sticky_assignment(SEED_QUEUES, [c for c in cids if c != gone], _holdings(before))
            assert moved(before, after) == 6, (cids, gone)
            assert sorted(Counter(after.values()).values()) == [8, 8, 8]
            assert all(after[mq] == cid for mq, cid in before.items() if cid != gone)


def test_a_join_moves_only_the_newcomers_quota() -> None:
    rng = random.Random(5)
    for _ in range(200):
        *cids, newcomer = _random_ids(rng, 5)
        before = sticky_assignment(SEED_QUEUES, cids, {})
        after = sticky_assignment(SEED_QUEUES, [*cids, newcomer], _holdings(before))
        assert moved(before, after) == 4  # 24 // 5: the newcomer's queues, nothing else
        assert sorted(Counter(after.values()).values()) == [4, 5, 5, 5, 5]


def test_with_no_holdings_it_is_bounded_hash() -> None:
    rng = random.Random(7)
    for n in range(1, 9):
        cids = _random_ids(rng, n)
        assert sticky_assignment(SEED_QUEUES, cids, {}) == bounded_assignment(SEED_QUEUES, cids)


def test_conflicts_stale_queues_and_strangers_are_resolved() -> None:
    a, b = "10.0.0.1@1", "10.0.0.2@2"
    queues = SEED_QUEUES[:4]
    gone_topic = MessageQueue("Other", "broker-a", 0)
    # Both claim every queue, a stranger claims one, and a queue of another topic is reported.
    holdings = {a: set(queues) | {gone_topic}, b: set(queues), "10.0.0.9@9": {queues[0]}}
    owner = sticky_assignment(queues, [b, a], holdings)
    assert set(owner) == set(queues)
    assert sorted(Counter(owner.values()).values()) == [2, 2]
    # Every member computes the same, whatever order the broker lists them in.
    assert sticky_assignment(queues, [a, b], holdings) == owner


def test_strategy_shares_follow_the_assignment_and_check_input() -> None:
    cids = ["10.0.0.1@1", "10.0.0.2@2", "10.0.0.3@3"]
    holdings = _holdings(bounded_assignment(SEED_QUEUES, cids[:2]))
    strategy = AllocateSticky().knowing(holdings)
    owner = sticky_assignment(SEED_QUEUES, cids, holdings)
    for cid in cids:
        assert strategy.allocate("g", cid, SEED_QUEUES, cids) == [
            mq for mq in SEED_QUEUES if owner[mq] == cid
        ]
    assert strategy.allocate("g", "10.0.0.4@4", SEED_QUEUES, cids) == []  # not a member yet
    plain = bounded_assignment(SEED_QUEUES, cids)
    assert AllocateSticky().allocate("g", cids[0], SEED_QUEUES, cids) == [
        mq for mq in SEED_QUEUES if plain[mq] == cids[0]
    ]


def _converged(queues: list[MessageQueue], held: Mapping[str, set[MessageQueue]]) -> bool:
    every = [mq for share in held.values() for mq in share]
    sizes = [len(share) for share in held.values()]
    return sorted(every, key=str) == sorted(queues, key=str) and max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 7),
    m=st.integers(1, 40),
    seed=st.integers(0, 2**32),
    stale_steps=st.integers(0, 30),
)
def test_rebalances_on_stale_snapshots_converge(n: int, m: int, seed: int, stale_steps: int) -> None:
    """Members rebalance one at a time in random orders; while membership settles each reads a
    snapshot in which any other member's holdings may be outdated (an earlier state of it). Once every
    member has read fresh holdings twice in a row, the group has no overlap, no gap and is balanced, and
    from then on nothing moves; a member leaving then moves exactly its queues."""
    rng = random.Random(seed)
    cids = _random_ids(rng, n)
    queues = [MessageQueue("T", f"broker-{i % 3}", i) for i in range(m)]
    held = {c: set(rng.sample(queues, rng.randint(0, m))) for c in cids}
    history = {c: [set(held[c])] for c in cids}

    def rebalance(cid: str, snapshot: Mapping[str, set[MessageQueue]]) -> None:
        owner = sticky_assignment(queues, cids, {**snapshot, cid: held[cid]})
        held[cid] = {mq for mq, c in owner.items() if c == cid}
        history[cid].append(set(held[cid]))

    for _ in range(stale_steps):
        cid = rng.choice(cids)
        rebalance(cid, {c: rng.choice(history[c]) for c in cids})
    for _ in range(2):
        for cid in rng.sample(cids, n):
            rebalance(cid, held)
    assert _converged(queues, held)
    settled = {c: set(s) for c, s in held.items()}
    for cid in cids:
        rebalance(cid, held)
    assert held == settled
    if n >= 2:
        gone = rng.choice(cids)
        before = {mq: c for c, share in settled.items() for mq in share}
        after = sticky_assignment(queues, [c for c in cids if c != gone], settled)
        assert moved(before, after) == len(settled[gone])
        sizes = Counter(after.values())
        assert max(sizes.values(), default=0) - min(sizes.values(), default=0) <= 1
