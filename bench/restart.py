"""Restart with 1 000 000 pending, and memory after draining them (issue 11 "must show").

1. A store holding ``--pending`` spooled messages (256-byte incompressible bodies), due in a day so a
   restart has nothing to replay: ``rocksidecar serve`` is started ``--restarts`` times on it (each
   time stopped with SIGTERM once /healthz answers); printed: seconds from exec to /healthz, with
   the open-time merge of small SST files counted in (storage/rocks.py, MAX_FILES_PER_CF), plus the
   cost of that merge when it hits the 1M-key pending column family (a compact_range of it).
2. The same messages due now, a sidecar with devbroker up: the time to drain them all, then the
   sidecar's resident memory (VmRSS) and peak (VmHWM) once the store is empty.

    .venv/bin/python -m bench.restart [--pending 1000000] [--restarts 10] [--baseline CHECKOUT]

Results: bench/RESULTS.md ("Restart with 1 000 000 pending").
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.common import (
    REPO,
    bench_parser,
    devbroker_process,
    environment,
    free_port,
    memory_kb,
    scratch_dir,
    wait_for_http,
)
from bench.pending import fill_pending
from bench.sidecar_process import sidecar_process
from rocksidecar.retry.keys import COLUMN_FAMILIES, PENDING_CF
from rocksidecar.retry.record import RetryRecord
from rocksidecar.storage.rocks import RocksKV

BODY_BYTES = 256
DAY_MS = 86_400_000


def load(path: Path, n: int, due_ms: int) -> None:
    """n pending messages as spool writes them (value + index), all due at ``due_ms`` onwards."""
    fill_pending(
        path,
        n,
        lambda i: (
            RetryRecord(id=f"C0A80001{i:024X}", topic="RestartBench", body=os.urandom(BODY_BYTES)),
            due_ms + i // 1000,
        ),
    )


def proc_status(pid: int) -> dict[str, int]:
    """The resident memory (VmRSS) and its peak (VmHWM) of ``pid``, in whole MB."""
    mem = memory_kb(pid)
    return {k: mem[k] // 1024 for k in ("VmRSS", "VmHWM")}


def pending(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(r"^rocksidecar_retry_pending (\S+)$", text, re.M))


def start_to_healthz(src: Path, root: Path) -> tuple[float, int]:
    """Seconds from exec of `rocksidecar serve` (the code in ``src``) to /healthz 200, and its VmRSS
    then; stopped with SIGTERM. No name server (127.0.0.1:1): nothing is sent, nothing is due."""
    http_addr = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "ROCKSIDECAR_HTTP_ADDR": http_addr,
        "ROCKSIDECAR_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "ROCKSIDECAR_DATA_DIR": str(root / "store"),
        "ROCKSIDECAR_NAMESRV": "127.0.0.1:1",
        "ROCKSIDECAR_LOG_LEVEL": "warning",
    }
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rocksidecar.app.cli", "serve"], cwd=src, env=env)
    try:
        if not wait_for_http(f"http://{http_addr}/healthz", proc, 120):
            raise RuntimeError(f"the sidecar from {src} did not start")
        took = time.perf_counter() - started
        return took, proc_status(proc.pid)["VmRSS"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def restarts(root: Path, n: int, times: int, baseline: Path | None) -> None:
    """Alternating this tree and ``baseline`` (another checkout) on copies of one store: a ratio from
    one run, whatever else the machine is doing."""
    load(root / "this" / "store" / "store", n, int(time.time() * 1000) + DAY_MS)
    trees = {"this": REPO}
    if baseline is not None:
        shutil.copytree(root / "this", root / "baseline")
        trees["baseline"] = baseline
    took: dict[str, list[float]] = {name: [] for name in trees}
    rss: list[int] = []
    for _ in range(times):
        for name, src in trees.items():
            seconds, resident = start_to_healthz(src, root / name)
            took[name].append(seconds)
            rss.append(resident)
    for name, values in took.items():
        median = statistics.median(values)
        runs = ", ".join(f"{t:.2f}" for t in values)
        print(f"restart with {n} pending, exec to /healthz, {name}: median {median:.2f} s ({runs})")
    if baseline is not None:
        ratio = statistics.median(took["this"]) / statistics.median(took["baseline"])
        print(f"  ratio this / baseline: {ratio:.2f}")
    print(f"  VmRSS when ready {min(rss)}-{max(rss)} MB")
    kv = RocksKV.open(root / "this" / "store" / "store", COLUMN_FAMILIES)
    try:
        started = time.perf_counter()
        kv.compact(PENDING_CF)
        took_s = time.perf_counter() - started
        print(f"  merging the pending column family ({n} keys) into one file: {took_s:.2f} s")
    finally:
        kv.close()


def drain(root: Path, n: int) -> None:
    load(root / "store" / "store", n, int(time.time() * 1000) - DAY_MS)
    with devbroker_process() as dev, sidecar_process(dev.namesrv, root) as (url, proc):
        started = time.perf_counter()
        while pending(url) > 0:
            time.sleep(0.5)  # another process draining: polling is all we have
        took = time.perf_counter() - started
        time.sleep(5)  # let the last batches settle before reading memory
        mem = proc_status(proc.pid)
        print(f"drain of {n} into devbroker: {took:.1f} s ({n / took:.0f} msg/s)")
        print(f"  after the drain: VmRSS {mem['VmRSS']} MB, peak VmHWM {mem['VmHWM']} MB")


def main() -> int:
    p = bench_parser(__doc__, pending=1_000_000, restarts=10)
    p.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    p.add_argument("--baseline", type=Path, default=None, help="another checkout to compare restarts with")
    args = p.parse_args()
    print(environment())
    with scratch_dir(args.dir, "restart-bench-", keep_given=True) as root:
        restarts(root / "restart", args.pending, args.restarts, args.baseline)
        drain(root / "drain", args.pending)
    return 0


if __name__ == "__main__":
    sys.exit(main())
