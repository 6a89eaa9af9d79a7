"""The sidecar's CPU seconds per 100 000 messages in several checkouts, interleaved in one run (issue 26's
speed check on a busy machine: throughput swings with other people's load, the CPU one process spends
per message much less). Each tree's own .venv runs `rocksidecar serve` against the same name server;
wrk drives POST /v1/messages over 32 connections and POST /v1/messages:batch of 100 over 8, as
bench.compare does; each round starts a fresh sidecar per tree and rotates which tree goes first.
The first tree is the anchor: each figure is printed with its ratio to the anchor's in the same round,
and the median of those ratios. ``--together`` runs every tree's sidecar at the same time under the same
load (one wrk per sidecar, started together), so that each round's trees share the machine's load
moment by moment rather than one after the other.

    .venv/bin/python -m bench.cpu_trees --rounds 3 /tmp/base26 .    # anchor first; "." is this checkout
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import bench_parser, environment
from bench.compare import BODY, Measured, wrk
from bench.sidecar_process import sidecar_process

PATHS = ("x32", "x1", "batch")


def _bodies(topic: str) -> tuple[bytes, bytes]:
    """The bodies bench.compare posts: one 256-byte message, and a batch of 100 of them."""
    single = json.dumps({"topic": topic, "body": BODY}).encode()
    return single, json.dumps({"messages": [{"topic": topic, "body": BODY}] * 100}).encode()


def measure_tree(tree: Path, namesrv: str, topic: str, seconds: float) -> dict[str, Measured]:
    single, batch = _bodies(topic)
    with (
        tempfile.TemporaryDirectory() as data,
        sidecar_process(namesrv, Path(data), tree=tree) as (url, proc),
    ):
        wrk(url, proc.pid, "/v1/messages", single, 8, 2, 1)  # warm up: routes, connections, queues
        return {
            "x32": wrk(url, proc.pid, "/v1/messages", single, 32, seconds, 1),
            "x1": wrk(url, proc.pid, "/v1/messages", single, 1, seconds, 1),
            "batch": wrk(url, proc.pid, "/v1/messages:batch", batch, 8, seconds, 100),
        }


def measure_together(
    trees: list[Path], namesrv: str, topic: str, seconds: float
) -> list[dict[str, Measured]]:
    single, batch = _bodies(topic)
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(trees)) as pool:
        running = []
        for tree in trees:
            data = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            running.append(stack.enter_context(sidecar_process(namesrv, data, tree=tree)))

        def each(path: str, body: bytes, connections: int, secs: float, per: int) -> list[Measured]:
            jobs = [
                pool.submit(wrk, url, proc.pid, path, body, connections, secs, per) for url, proc in running
            ]
            return [j.result() for j in jobs]

        each("/v1/messages", single, 8, 2, 1)  # warm up
        x32 = each("/v1/messages", single, 32, seconds, 1)
        one = each("/v1/messages", single, 1, seconds, 1)
        many = each("/v1/messages:batch", batch, 8, seconds, 100)
    return [{"x32": a, "x1": b, "batch": c} for a, b, c in zip(x32, one, many, strict=True)]


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("trees", nargs="+", type=Path, help="checkouts with a .venv; the first is the anchor")
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="per path")
    parser.add_argument("--together", action="store_true", help="all trees' sidecars at once, same load")
    args = parser.parse_args()
    trees = [t.resolve() for t in args.trees]
    for t in trees:
        if not (t / ".venv" / "bin" / "rocksidecar").exists():
            parser.error(f"{t} has no .venv/bin/rocksidecar: run `make -C {t} .venv/.runtime-stamp`")
    topic = f"RsCpuTrees{int(time.time())}"
    print(f"bench.cpu_trees: topic {topic}; {environment()}", flush=True)
    # results[tree index][path] -> one Measured per round
    results: list[dict[str, list[Measured]]] = [{p: [] for p in PATHS} for _ in trees]
    for r in range(args.rounds):
        order = list(range(len(trees)))
        order = order[r % len(order) :] + order[: r % len(order)]
        if args.together:
            together = measure_together([trees[i] for i in order], args.namesrv, topic, args.seconds)
            measured = dict(zip(order, together, strict=True))
        for i in order:
            got = measured[i] if args.together else measure_tree(trees[i], args.namesrv, topic, args.seconds)
            for p in PATHS:
                results[i][p].append(got[p])
                m = got[p]
                note = f"  NOTE {m.note}" if m.note else ""
                print(
                    f"round {r + 1} {trees[i]} {p}: {m.rate:,.0f} msg/s, {m.cpu_per_100k:.2f} cpu-s per 100k,"
                    f" p50 {m.p50_ms:.2f} ms{note}",
                    flush=True,
                )
        print(f"round {r + 1}/{args.rounds} done; load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"\nCPU seconds per 100 000 messages, median of {args.rounds} rounds (ratios to {trees[0]})")
    for p in PATHS:
        anchor = [m.cpu_per_100k for m in results[0][p]]
        for i, t in enumerate(trees):
            cpu = [m.cpu_per_100k for m in results[i][p]]
            rate = [m.rate for m in results[i][p]]
            ratio = statistics.median(c / a for c, a in zip(cpu, anchor, strict=True))
            rates = statistics.median(r / a.rate for r, a in zip(rate, results[0][p], strict=True))
            print(
                f"  {p:<6} {str(t)[-40:]:<40} {statistics.median(cpu):7.2f} cpu-s  {ratio:5.2f}x"
                f"  ({', '.join(f'{c:.2f}' for c in cpu)}); rate {statistics.median(rate):,.0f} msg/s"
                f" {rates:5.2f}x"
            )


if __name__ == "__main__":
    main()
