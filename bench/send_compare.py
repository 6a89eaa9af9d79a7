"""Send throughput of this checkout against a baseline checkout (issue 12: none worse by more than 10 %).

Both run bench.send_throughput of their own tree, as a subprocess, against the same devbroker (started
here, from this checkout) or the same real broker (--namesrv). Rounds alternate which side goes first,
so load that drifts during the run hits both alike; each row is the median over the rounds, and the
ratio is this checkout's median over the baseline's (>= 0.90 is the goal).

    git archive 85519f0 | tar -x -C /tmp/base   # the pre-redesign tree
    .venv/bin/python -m bench.send_compare --baseline /tmp/base [--rounds 5] [--quick]
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench.common import REPO, bench_parser, environment, namesrv_or_devbroker, rotated

# "  devbroker: single, 64 in flight      3,141.1 msg/s   0.51x" as bench.send_throughput prints it
_ROW = re.compile(r"^\s+\S+(?: \S+)*?: (?P<name>.+?)\s+(?P<value>[\d,]+\.\d) msg/s")


def run_side(tree: Path, namesrv: str, args: list[str]) -> dict[str, float]:
    """One bench.send_throughput run of ``tree`` against ``namesrv``: row name -> msg/s."""
    cmd = [sys.executable, "-m", "bench.send_throughput", "--namesrv", namesrv, "--no-devbroker"]
    cmd += ["--java-ctl", os.devnull, *args]  # no Java anchor: both sides are measured, not Java
    done = subprocess.run(cmd, check=False, cwd=tree, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: bench.send_throughput exited {done.returncode}:\n{done.stderr[-3000:]}")
    out = done.stdout
    rows = {m["name"]: float(m["value"].replace(",", "")) for m in map(_ROW.match, out.splitlines()) if m}
    if not rows:
        raise RuntimeError(f"no rows in the output of {tree}:\n{out}")
    return rows


def compare(baseline: Path, namesrv: str, rounds: int, args: list[str]) -> None:
    this: dict[str, list[float]] = {}
    base: dict[str, list[float]] = {}
    for r in range(rounds):
        for tree, into in rotated([(REPO, this), (baseline, base)], r):
            for name, value in run_side(tree, namesrv, args).items():
                into.setdefault(name, []).append(value)
        print(f"round {r + 1}/{rounds} done; {environment()}", flush=True)
    print(f"\nmsg/s, median of {rounds} interleaved rounds (this / baseline {baseline})")
    for name, values in this.items():
        mine, theirs = statistics.median(values), statistics.median(base.get(name, [float("nan")]))
        print(f"  {name:<28} this {mine:>10,.1f}  baseline {theirs:>10,.1f}  {mine / theirs:5.2f}x")
        pairs = list(zip(values, base.get(name, []), strict=False))
        spread = " / ".join(f"{a:,.0f}:{b:,.0f}" for a, b in pairs)
        # each round's two runs are back to back, so their ratio sees (nearly) the same load
        paired = statistics.median(a / b for a, b in pairs) if pairs else float("nan")
        print(f"    rounds (this:baseline) {spread}; median of the per-round ratios {paired:.2f}x")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the baseline tree (e.g. 85519f0)")
    parser.add_argument("--namesrv", help="a real RocketMQ name server instead of a devbroker")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small runs, 3 rounds: a smoke test")
    args = parser.parse_args()
    if not (args.baseline / "bench" / "send_throughput.py").is_file():
        parser.error(f"--baseline: no bench/send_throughput.py under {args.baseline}")
    sizes = ["--singles", "5000", "--batches", "100"] if args.quick else []
    rounds = 3 if args.quick else args.rounds
    print(f"send throughput, this checkout vs {args.baseline}; {environment()}")
    with namesrv_or_devbroker(args.namesrv) as namesrv:
        compare(args.baseline, namesrv, rounds, sizes)


if __name__ == "__main__":
    main()
