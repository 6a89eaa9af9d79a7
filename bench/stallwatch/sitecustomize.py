"""Loop-stall watch for benchmark child processes (bench.stalls; not part of the product).

Put this folder on a child's PYTHONPATH with STALL_DIR set: a thread posts a callback to the process's
asyncio loop every 10 ms and times how long it waits. A wait over STALL_MS is a stall; for each one it
writes a JSON line to STALL_DIR/<pid>.jsonl: the wall time it began, its length, the CPU the loop's
thread and the whole process used meanwhile (little CPU in a long stall: the process was not running,
so the machine, not its own code, made it late), and the loop thread's stacks sampled every 4 ms during
it (what ran, when it ran). Each stall is appended as it ends. Python imports a sitecustomize module
at start-up if one is on the path.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections import Counter
from types import FrameType
from typing import Any

STALL_MS = float(os.environ.get("STALL_MS", "20"))
STALL_DIR = os.environ.get("STALL_DIR")
MAX_STALLS = 20_000  # bounded: a long run keeps the first ones
FRAMES = 12


def _stack(frame: FrameType | None) -> str:
    out: list[str] = []
    while frame is not None and len(out) < FRAMES:
        code = frame.f_code
        out.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(out)


def _watch(loop: asyncio.AbstractEventLoop, loop_thread: int, path: str) -> None:
    clock = time.pthread_getcpuclockid(loop_thread)
    written = 0
    while not loop.is_closed():
        posted, wall = time.monotonic(), time.time()
        cpu0, proc0 = time.clock_gettime(clock), time.process_time()
        ran = threading.Event()
        try:
            loop.call_soon_threadsafe(ran.set)
        except RuntimeError:  # the loop closed
            return
        stacks: Counter[str] = Counter()
        while not ran.wait(0.004):
            if loop.is_closed():  # stopped before it ran the callback: the process is ending
                return
            if (time.monotonic() - posted) * 1000 > STALL_MS:
                frame = sys._current_frames().get(loop_thread)
                stacks[_stack(frame)] += 1
                del frame  # a held frame keeps its locals (buffers, views) alive
        lag_ms = (time.monotonic() - posted) * 1000
        if lag_ms > STALL_MS and written < MAX_STALLS:
            stall = {
                "t": round(wall, 3), "lag_ms": round(lag_ms, 1),
                "loop_cpu_ms": round((time.clock_gettime(clock) - cpu0) * 1000, 1),
                "proc_cpu_ms": round((time.process_time() - proc0) * 1000, 1),
                "stacks": stacks.most_common(4),
            }  # fmt: skip
            with open(path, "a") as f:  # at once: a killed process keeps what it saw
                f.write(json.dumps(stall) + "\n")
            written += 1
        time.sleep(0.01)


def _install(into: str) -> None:
    run = asyncio.Runner.run

    def watched_run(self: asyncio.Runner, coro: Any, **kwargs: Any) -> Any:
        loop = self.get_loop()  # creates the runner's loop
        path = os.path.join(into, f"{os.getpid()}.jsonl")
        # not a daemon: it ends when the loop closes, so a stall seen just before is still written
        threading.Thread(target=_watch, args=(loop, threading.get_ident(), path)).start()
        return run(self, coro, **kwargs)

    asyncio.Runner.run = watched_run  # type: ignore[method-assign]


if STALL_DIR:
    _install(STALL_DIR)
