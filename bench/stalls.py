"""Where a latency tail goes: the loop stalls of benchmark child processes and the machine's CPU meanwhile.

``child_env(dir)`` puts bench/stallwatch on a child's path (its sitecustomize times the child's asyncio
loop from a thread, see there); ``MachineCpu`` samples /proc/stat; ``report`` reads the stalls of a time
window and says how long the loops stalled, how much of that time their own thread ran (the rest: the
process was not running or waited for the GIL), how busy the machine was and how much the hypervisor
took (steal), and which frames ran during stalls. Used by bench.dmq_copies --stalls.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

WATCH_DIR = Path(__file__).resolve().parent / "stallwatch"
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def child_env(into: Path, stall_ms: float = 20.0) -> dict[str, str]:
    """What a child's environment needs for its stalls to be written into ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    root = str(WATCH_DIR.parent.parent)
    return {"PYTHONPATH": os.pathsep.join((root, str(WATCH_DIR))), "STALL_DIR": str(into),
            "STALL_MS": str(stall_ms)}  # fmt: skip


def cpu_times() -> dict[str, int]:
    """The machine's CPU time by kind, in clock ticks (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        values = f.readline().split()[1 : 1 + len(STAT_FIELDS)]
    return dict(zip(STAT_FIELDS, map(int, values), strict=True))


def busy_share(a: dict[str, int], b: dict[str, int]) -> tuple[float, float]:
    """Busy and steal shares of the machine's CPU between two ``cpu_times``."""
    d = {k: b[k] - a[k] for k in STAT_FIELDS}
    total = sum(d.values()) or 1
    return (total - d["idle"] - d["iowait"] - d["steal"]) / total, d["steal"] / total


class MachineCpu:
    """/proc/stat every ``every_s`` in a thread, to read the machine's CPU over any window after."""

    def __init__(self, every_s: float = 0.02) -> None:
        self._every = every_s
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.samples.append((time.time(), cpu_times()))

    def window(self, t0: float, t1: float) -> tuple[float, float] | None:
        """(busy, steal) shares from the last sample at or before t0 to the first at or after t1."""
        before = [s for t, s in self.samples if t <= t0]
        after = [s for t, s in self.samples if t >= t1]
        return busy_share(before[-1], after[0]) if before and after else None


def report(into: Path, t0: float, t1: float, machine: MachineCpu, top: int = 6) -> list[str]:
    """Lines about the stalls that began in [t0, t1] (wall-clock seconds)."""
    stalls = [s for f in sorted(into.glob("*.jsonl")) for line in f.read_text().splitlines()
              if t0 <= (s := json.loads(line))["t"] <= t1]  # fmt: skip
    if not stalls:
        return [f"loop stalls over the watch's threshold: none in {t1 - t0:.0f} s"]
    lag = sum(s["lag_ms"] for s in stalls)
    loop_cpu = sum(s["loop_cpu_ms"] for s in stalls)
    long = [s for s in stalls if s["lag_ms"] > 50]
    shares = [(w, s["lag_ms"]) for s in stalls if (w := machine.window(s["t"], s["t"] + s["lag_ms"] / 1000))]
    weight = sum(ms for _, ms in shares) or 1
    busy = sum(w[0] * ms for w, ms in shares) / weight
    steal = sum(w[1] * ms for w, ms in shares) / weight
    frames: Counter[str] = Counter()
    for s in stalls:
        for stack, n in s["stacks"]:
            frames[stack.split(" < ")[0]] += n
    sampled = sum(frames.values()) or 1
    whole = machine.window(t0, t1)
    lines = [
        f"loop stalls: {len(stalls)} ({len(long)} over 50 ms), {lag / 1000:.2f} s in all, max "
        f"{max(s['lag_ms'] for s in stalls):.0f} ms; the loop's thread ran {loop_cpu / lag * 100:.0f} % of "
        f"that time; the machine was {busy * 100:.0f} % busy ({steal * 100:.0f} % steal) during them"
        + (f", {whole[0] * 100:.0f} % busy ({whole[1] * 100:.0f} % steal) over the window" if whole else ""),
        "frames running during stalls (share of samples): "
        + "; ".join(f"{frame} {n / sampled * 100:.0f} %" for frame, n in frames.most_common(top)),
    ]
    return lines
