"""How many queues change owner when a consumer group changes, per allocation strategy.

    .venv/bin/python -m bench.allocation            # a few seconds; deterministic (seeded ids)
    .venv/bin/python -m bench.allocation --quick    # 30 groups per scenario

Each moved queue means a process queue rebuilt and, for the messages in flight, a redelivery (seed 003).
Scenarios: seed 003's (4 clients, 24 queues, the second client in sorted order leaves), a fifth client
joining 4, and one of 8 leaving 64 queues. Client ids are random ``ip@pid`` strings; every strategy sees
the same ones. Prints the mean and worst number of moved queues and how often the result is balanced
(loads differ by at most one).
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Sequence

from bench.common import bench_parser
from rocksidecar.rmq.consumer.allocate import (
    AllocateStrategy,
    Averagely,
    AveragelyByCircle,
    ConsistentHash,
    sort_for_allocation,
)
from rocksidecar.rmq.consumer.bounded_hash import BoundedHash, moved
from rocksidecar.rmq.consumer.sticky import sticky_assignment
from rocksidecar.rmq.message import MessageQueue

STRATEGIES: dict[str, AllocateStrategy] = {
    "averagely": Averagely(),
    "averagely by circle": AveragelyByCircle(),
    "consistent hash (10 vnodes)": ConsistentHash(10),
    "bounded hash (ours)": BoundedHash(),
}


def owners(
    strategy: AllocateStrategy, mqs: Sequence[MessageQueue], cids: Sequence[str]
) -> dict[MessageQueue, str]:
    mq_sorted, cid_sorted = sort_for_allocation(mqs, cids)
    return {mq: cid for cid in cid_sorted for mq in strategy.allocate("g", cid, mq_sorted, cid_sorted)}


def sticky_owners(
    mqs: Sequence[MessageQueue], before: Sequence[str], after: Sequence[str]
) -> tuple[dict[MessageQueue, str], dict[MessageQueue, str]]:
    """Sticky (ours, stateful): the group settled before the change, then every member computes from
    what the members hold then (as read through the broker)."""
    a = sticky_assignment(mqs, before, {})
    held: dict[str, set[MessageQueue]] = {}
    for mq, cid in a.items():
        held.setdefault(cid, set()).add(mq)
    return a, sticky_assignment(mqs, after, held)


def _client_id(rng: random.Random) -> str:
    ip = ".".join(str(rng.randint(1, 254)) for _ in range(3))
    return f"10.{ip}@{rng.randint(100, 99999)}"


def balanced(owner: dict[MessageQueue, str], cids: Sequence[str]) -> bool:
    loads = Counter(owner.values())
    sizes = [loads.get(c, 0) for c in cids]
    return max(sizes) - min(sizes) <= 1


def run(trials: int, seed: int) -> None:
    rng = random.Random(seed)
    scenarios = [
        ("4 -> 3 (seed 003), 24 queues", 4, 24, "leave"),
        ("4 -> 5, 24 queues", 4, 24, "join"),
        ("8 -> 7, 64 queues", 8, 64, "leave"),
    ]
    for title, n, m, change in scenarios:
        mqs = [MessageQueue("TopicTest", f"broker-{'ab'[i % 2]}", i // 2) for i in range(m)]
        groups = []
        for _ in range(trials):
            ids: set[str] = set()
            while len(ids) < n + 1:  # distinct, so the group really has n members before the change
                ids.add(_client_id(rng))
            cids = sorted(ids)
            if change == "leave":  # the second client in sorted order leaves, as in seed 003
                before = cids[:n]
                after = [c for c in before if c != before[1]]
            else:  # a client joins somewhere in the sorted order
                after = cids
                joiner = cids[rng.randrange(n + 1)]  # drawn once (not once per client, as before)
                before = [c for c in cids if c != joiner]
            groups.append((before, after))
        must = m // n if change == "leave" else m // (n + 1)
        print(f"\n{title}: at least {must} queues must move")
        print("| strategy | mean moved | worst | balanced after |\n|---|---:|---:|---:|")
        for name, strategy in STRATEGIES.items():
            moves, ok = [], 0
            for before, after in groups:
                a, b = owners(strategy, mqs, before), owners(strategy, mqs, after)
                moves.append(moved(a, b))
                ok += balanced(b, after)
            print(f"| {name} | {statistics.mean(moves):.2f} | {max(moves)} | {ok / len(groups):.0%} |")
        moves, ok = [], 0
        for before, after in groups:
            a, b = sticky_owners(mqs, before, after)
            moves.append(moved(a, b))
            ok += balanced(b, after)
        mean = statistics.mean(moves)
        print(f"| sticky (ours, holdings) | {mean:.2f} | {max(moves)} | {ok / len(groups):.0%} |")
        print(f"sticky moves {mean / must:.2f}x the least possible")


def main() -> None:
    parser = bench_parser(__doc__, trials=300, seed=2026)
    parser.add_argument("--quick", action="store_true", help="30 groups per scenario")
    args = parser.parse_args()
    run(30 if args.quick else args.trials, args.seed)


if __name__ == "__main__":
    main()
