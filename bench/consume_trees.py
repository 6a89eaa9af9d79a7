"""The subscription push's CPU per consumed message in several checkouts, interleaved in one run (issue 32
on a busy machine: the rate swings with other people's load, the CPU one process spends per message
much less).

One topic on the real broker is filled once; then, each round, every tree in turn (the order rotating)
runs bench.consume's push (a sidecar subscription, one POST per message to the no-op app) and its floor
(the same pull, a relay POSTing each body) in a fresh process of its own, each from the first offset in
a new group. The process is `<tree>/.venv/bin/python` if the tree has one, else this interpreter (or
``--python``), and imports that tree's code. Printed per run: msg/s and CPU (user + system of that
process) per message; then per tree the medians, and its ratio to the first tree (the anchor) in the
same round, median over the rounds.

    .venv/bin/python -m bench.consume_trees --namesrv 127.0.0.1:9876 --messages 50000 --rounds 3 \\
        /work/main .            # anchor first; "." is this checkout; about 6 min
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import uvloop

from bench.common import bench_parser, environment, rotated

# What a child runs: the tree's own bench.consume on the shared topic (its module global names it).
_CHILD = """
import json, sys, uvloop
import bench.consume as bc
bc.TOPIC = sys.argv[1]
async def main():
    async with bc.fast_app() as port:
        push = await bc.http_rate(sys.argv[2], int(sys.argv[3]), port)
        floor = await bc.relay_rate(sys.argv[2], int(sys.argv[3]), port)
    print(json.dumps({"push": [push.per_s, push.cpu_us], "floor": [floor.per_s, floor.cpu_us]}))
if __name__ == "__main__":
    uvloop.run(main())
"""


def run_tree(tree: Path, python: str, topic: str, namesrv: str, total: int) -> dict[str, list[float]]:
    own = tree / ".venv" / "bin" / "python"
    exe = python or (str(own) if own.exists() else sys.executable)
    out = subprocess.run(
        [exe, "-c", _CHILD, topic, namesrv, str(total)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        sys.exit(f"{tree}: the run failed:\n{out.stderr[-2000:]}")
    result: dict[str, list[float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def tree_output(tree: Path, *args: str) -> str:
    """What ``python args`` (this interpreter) printed, run in ``tree`` with that tree's code alone on
    PYTHONPATH (an environment of nothing else, so no other checkout leaks in); it must exit 0."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=tree,
        env={"PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def parse_trees(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, list[Path]]:
    """The options, and the checkouts named last (the first is the anchor), resolved."""
    parser.add_argument("trees", nargs="+", type=Path, help="checkouts; the first is the anchor")
    args = parser.parse_args()
    return args, [t.resolve() for t in args.trees]


def main() -> None:
    parser = bench_parser(__doc__, messages=50_000, size=256, rounds=3)
    parser.add_argument("--namesrv", required=True, help="the real name server")
    parser.add_argument("--python", default="", help="one interpreter for every tree (default: its .venv)")
    args, trees = parse_trees(parser)
    print(f"# consume_trees: {environment()}, broker at {args.namesrv}")
    from bench.consume import fill  # this checkout's, only to fill the shared topic

    topic = f"BenchConsumeTrees{time.time_ns() % 10**6}"
    queues = uvloop.run(fill(args.namesrv, args.messages, args.size, topic))
    print(f"filled {args.messages:,} messages of {args.size} B into {queues} queues of {topic}")
    runs: dict[Path, list[dict[str, list[float]]]] = {t: [] for t in trees}
    for r in range(args.rounds):
        for tree in rotated(trees, r):
            res = run_tree(tree, args.python, topic, args.namesrv, args.messages)
            runs[tree].append(res)
            print(
                f"round {r + 1} {tree}: push {res['push'][0]:,.0f} msg/s {res['push'][1]:.1f} us/msg; "
                f"floor {res['floor'][0]:,.0f} msg/s {res['floor'][1]:.1f} us/msg",
                flush=True,
            )
    anchor = runs[trees[0]]
    for tree in trees:
        mine = runs[tree]
        line = f"{tree}: "
        for kind in ("push", "floor"):
            rate = statistics.median(x[kind][0] for x in mine)
            cpu = statistics.median(x[kind][1] for x in mine)
            cpu_ratio = statistics.median(m[kind][1] / a[kind][1] for m, a in zip(mine, anchor, strict=True))
            rate_ratio = statistics.median(m[kind][0] / a[kind][0] for m, a in zip(mine, anchor, strict=True))
            line += f"{kind} {rate:,.0f} msg/s ({rate_ratio:.2f}x), CPU {cpu:.1f} us/msg ({cpu_ratio:.2f}x); "
        push_floor = statistics.median(x["push"][1] / x["floor"][1] for x in mine)
        print(line + f"CPU push/floor {push_floor:.2f}x")


if __name__ == "__main__":
    main()
