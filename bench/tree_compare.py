"""Any benchmark of this checkout against the same benchmark of a baseline checkout, in one run.

Issue 12 asks for its bench ratios (send throughput, HTTP load, retry store, delay) re-run after the
redesign, none worse by more than 10 %. `bench.send_compare` does it for send throughput with parsed
rows; this does it for any module of `bench/` by reading the figures off its printed lines: each line's
label is the line with its numbers taken out, so "tick with 1,000 pending  27.1 us" in both trees is one
figure. Each side runs with its own tree's virtualenv (a baseline needs its own `make install`, since the
benchmarks start `rocksidecar` processes from the venv), rounds alternate which side goes first, and
each figure is the median over the rounds; the per-round ratio (both runs back to back, so nearly the
same load) is printed beside it.

    git archive 85519f0 | tar -x -C /tmp/base && make -C /tmp/base install
    .venv/bin/python -m bench.tree_compare --baseline /tmp/base --rounds 3 -- bench.http_load --seconds 5
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO, bench_parser, environment, rotated

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
# The figure of a line: the first number with a unit after it ("12,911.0 msg/s", "27.1 us"), or the
# value of a "key_name   12.34" line (bench.delay's report); version numbers and counts have no unit.
_WITH_UNIT = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)\s*(?:msg/s|req/s|ms|us|µs|MB|s)\b")
_KEY_VALUE = re.compile(r"^\s*[a-z_]+\s+(-?[\d,]+\.\d+)\s*$")
# A figure is "higher is better" when its unit is a rate; times, sizes and ratios are "lower is better".
_RATE = re.compile(r"msg/s|req/s|/s\b|per CPU second")


@dataclass
class Figure:
    label: str
    this: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)

    @property
    def higher_is_better(self) -> bool:
        return bool(_RATE.search(self.label))


def figures(text: str) -> dict[str, float]:
    """label -> the figure of each line that has one (a line's label is the line with every number
    replaced by '#'); lines that repeat a label keep their first value."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not (match := _WITH_UNIT.search(line) or _KEY_VALUE.match(line)):
            continue  # headers carry the load average, not a figure
        label = " ".join(_NUMBER.sub("#", line).split())  # column padding varies with the numbers
        out.setdefault(label, float(match.group(1).replace(",", "")))
    return out


def run_side(tree: Path, module_args: list[str]) -> dict[str, float]:
    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{tree} has no .venv: run `make -C {tree} install` first")
    done = subprocess.run(
        [str(python), "-m", *module_args], cwd=tree, capture_output=True, text=True, check=False, timeout=3600
    )
    print(f"--- {tree}\n{done.stdout}", flush=True)  # the raw output, for the record
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(module_args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return figures(done.stdout)


def compare(baseline: Path, rounds: int, module_args: list[str]) -> list[Figure]:
    table: dict[str, Figure] = {}
    for r in range(rounds):
        for tree, is_this in rotated([(REPO, True), (baseline, False)], r):
            for label, value in run_side(tree, module_args).items():
                fig = table.setdefault(label, Figure(label))
                (fig.this if is_this else fig.base).append(value)
        print(f"round {r + 1}/{rounds} done; {environment()}", flush=True)
    return [f for f in table.values() if f.this and f.base]


def report(baseline: Path, rounds: int, module_args: list[str], figs: list[Figure]) -> None:
    print(f"\n{' '.join(module_args)}: median of {rounds} interleaved rounds, this / baseline {baseline}")
    print("(better: the ratio read the right way round, > 1 is this tree better; < 0.90 is >10 % worse)")
    for f in figs:
        mine, theirs = statistics.median(f.this), statistics.median(f.base)
        pairs = list(zip(f.this, f.base, strict=False))
        ratios = [a / b if f.higher_is_better else b / a for a, b in pairs if a and b]
        paired = statistics.median(ratios) if ratios else float("nan")
        print(f"  {f.label[:70]:<70} this {mine:>12,.2f} base {theirs:>12,.2f}  better {paired:5.2f}x")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout, with its .venv")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("module", nargs=argparse.REMAINDER, help="-- bench.MODULE [its arguments]")
    args = parser.parse_args()
    module_args = [a for a in args.module if a != "--"]
    if not module_args or not module_args[0].startswith("bench."):
        parser.error("give the benchmark after --, e.g. -- bench.http_load --seconds 5")
    figs = compare(args.baseline.resolve(), args.rounds, module_args)
    report(args.baseline, args.rounds, module_args, figs)


if __name__ == "__main__":
    main()
