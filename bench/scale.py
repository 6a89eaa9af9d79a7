"""Ten million pending (issue 18): one sidecar's stores holding ``--pending`` retries and as many
scheduled delays (256-byte incompressible bodies), against a 1 000 + 1 000 anchor filled and measured
the same way in the same run.

Printed, each with its ratio to the anchor:
1. fill rate through the stores' own bulk APIs (RetryStore.spool_many, DelayStore.schedule_many, 10 000
   a batch; an unsynced bulk load: the fill's KV never syncs the WAL);
2. opening the stores in-process (the RetryStore and DelayStore constructors: anything that counts or
   scans keys at open shows here);
3. ``rocksidecar serve`` started on the stores (median of 3 starts, 1 with --quick): exec to /healthz
   200, then to a send answered 2xx (no name server: the send is spooled), VmRSS when ready, after
   2 000 sends, and the peak (VmHWM);
4. seek/tick cost of both due queues (64 due keys at the head, the rest later);
5. spool p99 (8 concurrent spools) right after open (while a large store's exact key count runs in
   the background), then with and without a manual compaction of every column family in a thread;
6. bytes on disk per message after that compaction (SST sizes per column family).

    .venv/bin/python -m bench.scale [--pending 10000000] [--quick] [--dir SCRATCH]

Results: bench/RESULTS.md ("Ten million pending").
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from bench.common import bench_parser, environment, percentile, scratch_dir
from bench.restart import proc_status
from bench.sidecar_process import sidecar_process
from rocksidecar.app.service import COLUMN_FAMILIES
from rocksidecar.app.shutdown import close_stores
from rocksidecar.delay.message import DelayedMessage
from rocksidecar.delay.store import DelayStore
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.due_queue import DueQueue
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Op
from rocksidecar.storage.rocks import RocksKV

BODY_BYTES = 256
BATCH = 10_000
ANCHOR = 1_000
DUE_AT_HEAD = 64
DAY_MS = 86_400_000
SENDS = 2_000


def store_path(root: Path) -> Path:
    return root / "store" / "store"  # where `rocksidecar serve` with DATA_DIR=root/store opens it


class BulkKV(RocksKV):
    """The fill's KV: every write unsynced (a bulk load; the OS keeps the WAL across this process's exit)."""

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        super().write(ops, sync=False, no_slowdown=no_slowdown)

    def sync_wal(self) -> None:
        pass


async def fill(root: Path, n: int, base_ms: int) -> tuple[float, float]:
    """``n`` retries due from ``base_ms`` on and ``n`` delays due a day later; (retry, delay) msg/s."""
    kv = BulkKV.open(store_path(root), COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer)
    delay = DelayStore(kv, writer)
    rates = []
    try:
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            records = [
                RetryRecord(id=f"R{i:031X}", topic="ScaleBench", body=os.urandom(BODY_BYTES))
                for i in range(start, min(n, start + BATCH))
            ]
            await retry.spool_many(records, base_ms + start)  # keys of one call share a due ms
        rates.append(n / (time.perf_counter() - started))
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            msgs = [
                DelayedMessage(
                    id=f"D{i:031X}",
                    topic="ScaleBench",
                    body=os.urandom(BODY_BYTES),
                    due_ms=base_ms + DAY_MS + i,
                )
                for i in range(start, min(n, start + BATCH))
            ]
            await delay.schedule_many(msgs)  # due from a day after base_ms on
        rates.append(n / (time.perf_counter() - started))
    finally:
        await close_stores(retry, delay, writer, kv)
    return rates[0], rates[1]


def tick_us(queue: DueQueue, now: int, reps: int) -> float:
    """Median cost of one pass as the seek loops make it: due keys up to the bound, then the next key."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        rows = queue.due(queue.floor, now, 128)
        queue.first(rows[-1][0] + b"\x00" if rows else queue.floor)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


async def open_and_tick(root: Path, base_ms: int, reps: int) -> dict[str, float]:
    """Open time of both stores (constructors) and their tick costs."""
    kv = RocksKV.open(store_path(root), COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    try:
        started = time.perf_counter()
        retry = RetryStore(kv, writer=writer)
        delay = DelayStore(kv, writer)
        opened = time.perf_counter() - started
        # Retry: the first spool_many call (up to BATCH keys) is due, a pass reads 128 of them. Delay:
        # DUE_AT_HEAD keys due.
        retry_now = base_ms
        delay_now = base_ms + DAY_MS + DUE_AT_HEAD - 1
        out = {
            "open_s": opened,
            "retry_tick_us": tick_us(retry.queue, retry_now, reps),
            "delay_tick_us": tick_us(delay.queue, delay_now, reps),
        }
        await retry.close()
        await delay.close()
        return out
    finally:
        await writer.close()
        kv.close()


def restarts(root: Path, times: int) -> dict[str, float]:
    """Median seconds and the highest memory figures of ``times`` restarts."""
    runs = [restart(root) for _ in range(times)]
    return {
        key: (statistics.median if key.endswith("_s") else max)(run[key] for run in runs) for key in runs[0]
    }


def restart(root: Path) -> dict[str, float]:
    """``rocksidecar serve`` on the stores: seconds to /healthz and to a send answered, memory."""
    payload = {"topic": "ScaleBench", "body": "x" * BODY_BYTES}
    started = time.perf_counter()
    with sidecar_process("127.0.0.1:1", root, ready_path="/healthz") as (url, proc):
        healthz_s = time.perf_counter() - started
        with httpx.Client(base_url=url, timeout=30) as client:
            answer = client.post("/v1/messages", json=payload)
            send_s = time.perf_counter() - started
            if not answer.is_success:
                raise RuntimeError(f"the first send was answered {answer.status_code}: {answer.text}")
            ready = proc_status(proc.pid)
            for _ in range(SENDS):
                client.post("/v1/messages", json=payload).raise_for_status()
        after = proc_status(proc.pid)
    return {
        "healthz_s": healthz_s,
        "send_s": send_s,
        "rss_ready_mb": ready["VmRSS"],
        "rss_after_sends_mb": after["VmRSS"],
        "rss_peak_mb": after["VmHWM"],
    }


async def spool_p99(retry: RetryStore, count: int, stop: asyncio.Future[None] | None) -> tuple[float, int]:
    """p99 ms of single spools, 8 at a time, for ``count`` spools or until ``stop`` is done."""
    latencies: list[float] = []

    async def caller(c: int) -> None:
        i = 0
        while len(latencies) < count and (stop is None or not stop.done()):
            record = RetryRecord(id=f"P{c:02d}{i:029X}", topic="ScaleBench", body=os.urandom(BODY_BYTES))
            t = time.perf_counter()
            await retry.spool(record, retry.now_ms() + 2 * DAY_MS)
            latencies.append((time.perf_counter() - t) * 1000)
            i += 1

    await asyncio.gather(*(caller(c) for c in range(8)))
    return percentile(latencies, 99), len(latencies)


def compact_all(kv: RocksKV) -> None:
    for cf in kv.column_families:
        kv.compact(cf)


async def compaction(root: Path, samples: int) -> dict[str, float]:
    """Spool p99 right after open, once the open's key counts are done, then during a compaction of
    every column family (in a thread)."""
    kv = RocksKV.open(store_path(root), COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer)
    try:
        opened, _ = await spool_p99(retry, samples, None)  # a large store's exact count is still running
        counted = getattr(retry, "wait_counted", None)  # absent from trees before storage.key_count
        if counted is not None:
            await asyncio.to_thread(counted)
        quiet, _ = await spool_p99(retry, samples, None)
        started = time.perf_counter()
        task = asyncio.ensure_future(asyncio.to_thread(compact_all, kv))
        busy, spooled = await spool_p99(retry, 10**9, task)
        await task
        took = time.perf_counter() - started
        sizes = {cf: kv._sst_bytes(cf) for cf in kv.column_families}
        await retry.close()
    finally:
        await writer.close()
        kv.close()
    p99s = {"opened_p99_ms": opened, "quiet_p99_ms": quiet, "busy_p99_ms": busy}
    return {**p99s, "busy_spools": spooled, "compact_s": took, **sizes}


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


# printed label | result key | unit
TABLE = f"""
fill, retry store (spool_many)            | retry_fill         | msg/s
fill, delay store (schedule_many)         | delay_fill         | msg/s
open both stores in-process               | open_s             | s
serve: exec to /healthz 200               | healthz_s          | s
serve: exec to first send answered        | send_s             | s
serve: VmRSS when ready                   | rss_ready_mb       | MB
serve: VmRSS after {SENDS} sends           | rss_after_sends_mb | MB
serve: peak VmHWM                         | rss_peak_mb        | MB
retry seek tick                           | retry_tick_us      | us
delay seek tick                           | delay_tick_us      | us
spool p99, right after open               | opened_p99_ms      | ms
spool p99, no compaction                  | quiet_p99_ms       | ms
spool p99, compaction of every CF running | busy_p99_ms        | ms
"""
ROWS = [tuple(cell.strip() for cell in row.split("|")) for row in TABLE.strip().splitlines()]


def line(label: str, anchor: float, big: float, unit: str) -> None:
    ratio = big / anchor if anchor else float("nan")
    print(f"  {label:<44} {anchor:>12.2f} {big:>12.2f} {unit:<6} ratio {ratio:6.2f}")


async def run(root: Path, n: int, quick: bool) -> None:
    base_ms = int(time.time() * 1000) + DAY_MS  # nothing falls due during the run
    sizes = {"anchor": ANCHOR, "large": n}
    results: dict[str, dict[str, float]] = {name: {} for name in sizes}
    for name, count in sizes.items():
        started = time.perf_counter()
        rates = await fill(root / name, count, base_ms)
        took = time.perf_counter() - started
        results[name].update(retry_fill=rates[0], delay_fill=rates[1])
        print(f"filled {name}: {count:,} retries + {count:,} delays in {took:.1f} s", flush=True)
    for name in sizes:
        results[name].update(await open_and_tick(root / name, base_ms, 50 if quick else 500))
        results[name].update(restarts(root / name, 1 if quick else 3))
        print(f"measured open, ticks and restart of {name}", flush=True)
    for name in sizes:
        results[name].update(await compaction(root / name, 1000 if quick else 3000))
        results[name]["disk"] = disk_bytes(store_path(root / name))
    a, b = results["anchor"], results["large"]
    print(f"\n{environment()}; {n:,} retries + {n:,} delays vs {ANCHOR:,} + {ANCHOR:,} (anchor)")
    print(f"  {'':<44} {'anchor':>12} {'large':>12}")
    for label, key, unit in ROWS:
        line(label, a[key], b[key], unit)
    stall = b["busy_p99_ms"] / b["quiet_p99_ms"]
    print(f"  {'compaction stall ratio (busy / quiet p99), large':<44} {stall:>25.2f}")
    spools = int(b["busy_spools"])
    print(f"  compaction of every CF, large: {b['compact_s']:.1f} s, {spools} spools during it")
    messages = 2 * n
    print(f"\nbytes on disk after compaction, large ({messages:,} messages of {BODY_BYTES} B):")
    for cf in sorted(k for k in b if k in COLUMN_FAMILIES):
        print(f"  {cf:<24} {b[cf] / 1e6:>10.1f} MB")
    print(
        f"  whole directory          {b['disk'] / 1e6:>10.1f} MB = {b['disk'] / messages:.0f} B per message"
    )


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--pending", type=int, default=10_000_000, help="retries, and as many delays")
    p.add_argument("--quick", action="store_true", help="fewer tick and spool samples")
    p.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = p.parse_args()
    with scratch_dir(args.dir, "scale-bench-") as root:
        asyncio.run(run(root, args.pending, args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
