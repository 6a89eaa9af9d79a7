"""bench.stalls: a child's loop stall is seen, timed, attributed to the frame that held the loop, and
told apart from CPU work by the loop thread's CPU time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench import stalls

CHILD = """
import asyncio, time

def blocks_the_loop():
    time.sleep(0.3)  # off the CPU: the loop thread is not running

async def main():
    await asyncio.sleep(0.05)
    blocks_the_loop()
    await asyncio.sleep(0.05)

asyncio.run(main())
"""


def test_a_child_loop_blocked_off_the_cpu_is_one_stall_with_its_frame(tmp_path: Path) -> None:
    into = tmp_path / "stalls"
    started = time.time()
    subprocess.run([sys.executable, "-c", CHILD], env=stalls.child_env(into), check=True, timeout=60)
    [path] = into.glob("*.jsonl")
    found = [json.loads(line) for line in path.read_text().splitlines()]
    # (a loaded machine may add stalls of its own: the one the child made is told by its frame)
    blocked = [s for s in found if any(":blocks_the_loop:" in st.split(" < ")[0] for st, _ in s["stacks"])]
    assert len(blocked) == 1, found
    [stall] = blocked
    assert stall["lag_ms"] >= 250
    assert stall["t"] >= started
    assert stall["loop_cpu_ms"] < stall["lag_ms"] / 2  # slept, not computed

    machine = stalls.MachineCpu(every_s=0.001)
    machine.samples = [(0.0, stalls.cpu_times()), (time.time() + 60, stalls.cpu_times())]
    lines = stalls.report(into, started, time.time(), machine)
    assert lines[0].startswith(f"loop stalls: {len(found)} (")
    assert "blocks_the_loop" in lines[1]


def test_busy_share_reads_idle_and_steal_apart() -> None:
    a = dict.fromkeys(stalls.STAT_FIELDS, 0)
    b = a | {"user": 60, "system": 10, "idle": 20, "steal": 10}
    busy, steal = stalls.busy_share(a, b)
    assert (round(busy, 2), round(steal, 2)) == (0.7, 0.1)


def test_no_stalls_in_the_window_says_so(tmp_path: Path) -> None:
    (tmp_path / "1.jsonl").write_text(json.dumps({"t": 5.0, "lag_ms": 30.0, "loop_cpu_ms": 1.0,
                                                   "proc_cpu_ms": 1.0, "stacks": []}) + "\n")  # fmt: skip
    lines = stalls.report(tmp_path, 10.0, 20.0, stalls.MachineCpu())
    assert lines == ["loop stalls over the watch's threshold: none in 10 s"]
