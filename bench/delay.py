"""Rock-DMQ local-mode benchmark: how late delayed messages reach devbroker (a process of its own) through
the producer's send_batch, in two scenarios, and the RSS with 1 000 000 pending. Results: bench/RESULTS.md.

    .venv/bin/python -m bench.delay [--burst 100000] [--pending 1000000] [--rate 2000] [--steady-s 30]

burst   N messages scheduled (schedule_many, synced), all due within the same second; lateness per message
        and when the last one was published.
steady  a store holding `--pending` messages due tomorrow; new messages are scheduled at `--rate`/s, each
        due 5 s later, so they fall due at that rate while about a million are pending.
Each scenario runs in a fresh child process, so its peak RSS is its own. Lateness is what the
scheduler's on_published hook reports: the time send_batch returned minus the due time, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from bench.bulk import bulk_write
from bench.common import (
    Countdown,
    bench_parser,
    child_output,
    devbroker_process,
    environment,
    memory_kb,
    percentile,
)
from rocksidecar.delay import COLUMN_FAMILIES, DelayedMessage, DelayScheduler, DelayStore
from rocksidecar.delay.scheduler import BATCH_MAX, MAX_IN_FLIGHT
from rocksidecar.delay.store import stored_ops
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import RocksKV

TOPIC = "bench_delay"
BODY_BYTES = 256
STEADY_LEAD_MS = 5000  # steady messages are due this long after they are scheduled
DAY_MS = 86_400_000


def msg(i: int, due_ms: int, body: bytes) -> DelayedMessage:
    return DelayedMessage(id=f"C0A80001{i:024X}", topic=TOPIC, body=body, due_ms=due_ms)


def load_pending(path: Path, n: int) -> float:
    """n messages due a day from now, written as schedule writes them (message + index), in bulk."""
    started = time.perf_counter()
    due = time.time_ns() // 1_000_000 + DAY_MS

    def puts(i: int) -> list[Put]:
        m = msg(i, due + i // 1000, os.urandom(BODY_BYTES))  # incompressible: real sizes
        return list(stored_ops(m)[1])

    bulk_write(path, COLUMN_FAMILIES, n, puts)
    return time.perf_counter() - started


# --- the child: one scenario against one store ------------------------------------------------------------
async def child(
    scenario: str, path: str, namesrv: str, n: int, rate: int, steady_s: float, batch_max: int, in_flight: int
) -> dict[str, float]:
    from bench.common import bench_producer
    from rocksidecar.rmq import Message

    client, producer = await bench_producer(namesrv, warm_topic=TOPIC)
    failed = 0

    async def publish(msgs: list[DelayedMessage]) -> list[object]:
        nonlocal failed
        batch = [Message(m.topic, m.body, m.tags, m.keys, m.properties, id=m.id) for m in msgs]
        results: list[object] = list(await producer.send_batch(batch))
        failed += sum(isinstance(r, Exception) for r in results)
        return results

    opened = time.perf_counter()
    kv = RocksKV.open(path, COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    out: dict[str, float] = {"open_s": time.perf_counter() - opened, "pending_at_open": store.stats().pending}
    lateness_ms: list[float] = []
    done = asyncio.Event()
    expected = n if scenario == "burst" else int(rate * steady_s)

    def on_published(lateness_s: float) -> None:
        lateness_ms.append(lateness_s * 1000)
        if len(lateness_ms) >= expected:
            done.set()

    scheduler = DelayScheduler(
        store, publish, on_published=on_published, batch_max=batch_max, max_in_flight=in_flight
    )
    await scheduler.start()
    lags: list[float] = []
    probe = asyncio.create_task(lag_probe(lags))
    if scenario == "burst":
        out.update(await burst(store, n, done))
    else:
        out.update(await steady(store, rate, steady_s, done))
    probe.cancel()
    await scheduler.close(grace_s=10.0)  # the last publish calls record what they sent
    out["pending_at_end"] = store.stats().pending
    await store.close()
    await writer.close()
    kv.close()
    await producer.close()
    await client.close()
    out.update(
        p50_ms=percentile(lateness_ms, 50), p99_ms=percentile(lateness_ms, 99), max_ms=max(lateness_ms),
        published=len(lateness_ms), failed_sends=failed,
        loop_lag_p99_ms=percentile(lags, 99) * 1000, loop_lag_max_ms=max(lags) * 1000,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )  # fmt: skip
    return out


async def burst(store: DelayStore, n: int, done: asyncio.Event) -> dict[str, float]:
    body = b"x" * BODY_BYTES
    started = time.perf_counter()
    due0 = store.now_ms() + 10_000 + n // 20  # time enough to schedule them all first
    for start in range(0, n, 1000):  # built chunk by chunk: the RSS is the sidecar's, not a list's
        await store.schedule_many(
            [msg(i, due0 + i * 1000 // n, body) for i in range(start, min(n, start + 1000))]
        )
    scheduled_s, slack_ms = time.perf_counter() - started, due0 - store.now_ms()
    await asyncio.wait_for(done.wait(), 120)
    return {"schedule_s": scheduled_s, "slack_before_due_s": slack_ms / 1000,
            "last_published_after_s": (store.now_ms() - due0) / 1000}  # fmt: skip


async def steady(store: DelayStore, rate: int, steady_s: float, done: asyncio.Event) -> dict[str, float]:
    """Schedule ``rate`` messages a second for ``steady_s``, each due STEADY_LEAD_MS later."""
    body = b"y" * BODY_BYTES
    tick_s, per_tick = 0.01, max(1, rate // 100)
    start_ms = store.now_ms()
    loop_start = time.perf_counter()
    rss_during: float = 0.0
    for k in range(int(steady_s / tick_s)):
        await asyncio.sleep(max(0.0, loop_start + k * tick_s - time.perf_counter()))  # pacing, not a sync
        base = start_ms + STEADY_LEAD_MS + k * 10
        await store.schedule_many(
            [msg(10**9 + k * per_tick + j, base + j * 10 // per_tick, body) for j in range(per_tick)]
        )
        if k % 100 == 0:
            rss_during = max(rss_during, resident_mb())
    await asyncio.wait_for(done.wait(), STEADY_LEAD_MS / 1000 + 60)
    return {"resident_mb": rss_during, "pending_during": store.stats().pending}


async def lag_probe(lags: list[float]) -> None:
    """How late a 1 ms timer fires: the event loop's responsiveness."""
    while True:
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t - 0.001)


async def own_cost(path: Path, n: int, batch_max: int, in_flight: int) -> tuple[float, float]:
    """The scheduler alone: n overdue messages into a publish that does nothing. (msg/s, per CPU s)."""
    kv = RocksKV.open(path, COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    due, body = store.now_ms() - 1000, b"x" * BODY_BYTES
    for start in range(0, n, 1000):
        await store.schedule_many([msg(i, due, body) for i in range(start, min(n, start + 1000))])
    published = Countdown(n)

    async def publish(msgs: list[DelayedMessage]) -> list[None]:
        published.add(len(msgs))
        return [None] * len(msgs)

    scheduler = DelayScheduler(store, publish, batch_max=batch_max, max_in_flight=in_flight)
    wall, cpu = time.perf_counter(), time.process_time()
    await scheduler.start()
    await published.done.wait()
    await scheduler.close(grace_s=10.0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert store.stats().pending == 0, "messages left behind"
    await store.close()
    await writer.close()
    kv.close()
    return n / wall, n / cpu


def resident_mb() -> float:
    return memory_kb()["VmRSS"] / 1024


def run_child(scenario: str, path: Path, namesrv: str, args: argparse.Namespace) -> dict[str, float]:
    numbers = (args.burst, args.rate, args.steady_s, args.batch_max, args.in_flight)
    out = child_output("-m", "bench.delay", "--child", scenario, str(path), namesrv, *map(str, numbers))
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


REPORTED = ("schedule_s", "slack_before_due_s", "last_published_after_s", "open_s", "pending_at_open",
            "pending_during", "pending_at_end", "resident_mb", "peak_rss_mb", "loop_lag_p99_ms",
            "loop_lag_max_ms")  # fmt: skip


def report(title: str, r: dict[str, float]) -> None:
    print(f"\n## {title}")
    print(f"published {r['published']:,.0f} (failed sends retried: {r['failed_sends']:,.0f})")
    print(f"lateness p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms")
    for key in REPORTED:
        if key in r:
            print(f"  {key:<24} {r[key]:>12,.2f}")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--burst", type=int, default=100_000, help="messages due within the same second")
    parser.add_argument("--pending", type=int, default=1_000_000, help="messages pending in the steady run")
    parser.add_argument("--rate", type=int, default=2000, help="messages falling due per second (steady)")
    parser.add_argument("--steady-s", type=float, default=30.0, help="length of the steady run")
    parser.add_argument("--batch-max", type=int, default=BATCH_MAX, help="messages per publish call")
    parser.add_argument("--in-flight", type=int, default=MAX_IN_FLIGHT, help="publish calls at once")
    parser.add_argument("--only", choices=("burst", "steady"), help="run one scenario")
    parser.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="delay-bench-"))
    print(f"# delay benchmark: {environment()} at start, uvloop, scratch {root}")
    print(f"# scheduler: batch_max {args.batch_max}, max_in_flight {args.in_flight}")
    try:
        rate, per_cpu = uvloop.run(own_cost(root / "own", args.burst, args.batch_max, args.in_flight))
        print(f"\n## the scheduler alone: {args.burst:,} overdue messages into a no-op publish")
        print(f"{rate:,.0f} msg/s ({per_cpu:,.0f} per CPU second; read, decode, claim, record as sent)")
        with devbroker_process(max_log_mb=4096) as dev:
            if args.only != "steady":
                burst = run_child("burst", root / "burst", dev.namesrv, args)
                report(f"burst: {args.burst:,} messages due within one second", burst)
            if args.only == "burst":
                return
            took = load_pending(root / "steady", args.pending)
            print(f"\n(loaded {args.pending:,} pending messages in {took:.1f} s)")
            title = f"steady: {args.rate:,}/s falling due for {args.steady_s:.0f} s, {args.pending:,} pending"
            report(title, run_child("steady", root / "steady", dev.namesrv, args))
    finally:
        print(f"\n# load average {os.getloadavg()[0]:.2f} at end")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        scenario, path, namesrv, n, rate, steady_s, batch_max, in_flight = sys.argv[2:10]
        numbers = int(n), int(rate), float(steady_s), int(batch_max), int(in_flight)
        result = uvloop.run(child(scenario, path, namesrv, *numbers))
        print(json.dumps(result))
    else:
        main()
