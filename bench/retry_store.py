"""Retry-store benchmark: spill rate (group commit vs one synced put per message, and the sync
strategies with their event-loop lag), replay rate, seek-tick cost with 1 000 vs 1 000 000 pending
keys and after 1 000 000 delivered-and-deleted keys, and peak RSS with 1 000 000 pending.
Every ratio compares figures measured in the same run. Results: bench/RESULTS.md.

    .venv/bin/python -m bench.retry_store [--pending 1000000] [--dir /tmp/x] [--asyncio]

Replay goes into an in-process deliver stub (an async no-op) until devbroker is available.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bench.common import bench_parser, child_output, environment
from bench.pending import fill_pending
from rocksidecar.retry.keys import COLUMN_FAMILIES, PENDING_CF
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.group_commit import GroupCommitWriter, SyncStrategy
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import RocksKV

BODY = b"x" * 256
BASE_MS = 1_700_000_000_000
DUE_AT_HEAD = 64  # due keys at the head of the pending range in the tick measurements


def rec(i: int, body: bytes = BODY) -> RetryRecord:
    return RetryRecord(id=f"C0A80001{i:024X}", topic="bench", body=body)


def seed_rate(path: Path, n: int) -> float:
    """The seed's pattern: one synced put per message."""
    kv = RocksKV.open(path, COLUMN_FAMILIES)
    try:
        started = time.perf_counter()
        for i in range(n):
            kv.write([Put(PENDING_CF, b"%013d" % i, BODY)], sync=True)
        return n / (time.perf_counter() - started)
    finally:
        kv.close()


async def lag_probe(lags: list[float], stop: asyncio.Event) -> None:
    """How late a 1 ms timer fires: the event loop's responsiveness while writes run."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t - 0.001)


async def concurrent(
    n: int, concurrency: int, op: Callable[[int], Awaitable[object]]
) -> tuple[float, list[float]]:
    lags: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(lag_probe(lags, stop))
    per = n // concurrency

    async def caller(c: int) -> None:
        for j in range(per):
            await op(c * per + j)

    started = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(concurrency)))
    elapsed = time.perf_counter() - started
    stop.set()
    await probe
    return per * concurrency / elapsed, lags


async def writer_rate(path: Path, n: int, concurrency: int) -> float:
    """Group commit alone: one Put of a 256-byte value per caller."""
    kv = RocksKV.open(path, COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    try:
        rate, _ = await concurrent(
            n, concurrency, lambda i: writer.write([Put(PENDING_CF, b"%013d" % i, BODY)])
        )
        return rate
    finally:
        await writer.close()
        kv.close()


async def spool_rate(
    path: Path, n: int, concurrency: int, strategy: SyncStrategy, per_call: int
) -> tuple[float, list[float]]:
    """The full spool path: record encoding, pending key + id index, group commit with sync.
    ``per_call`` > 1 uses spool_many (one call per request batch)."""
    kv = RocksKV.open(path, COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv, strategy=strategy)
    store = RetryStore(kv, writer=writer, owns_kv=True)
    records = [rec(i) for i in range(n)]
    try:
        if per_call == 1:
            return await concurrent(n, concurrency, lambda i: store.spool(records[i]))
        chunks = [records[i : i + per_call] for i in range(0, n, per_call)]
        rate, lags = await concurrent(len(chunks), concurrency, lambda i: store.spool_many(chunks[i]))
        return rate * per_call, lags
    finally:
        await store.close()
        await writer.close()  # the store closes only a writer it created


async def spill(root: Path, n: int, seed: float, rounds: int) -> None:
    """Each configuration ``rounds`` times, interleaved, so load from other work spreads evenly."""
    configs = [(c, s, 1) for c in (64, 1024) for s in SyncStrategy] + [(16, s, 100) for s in SyncStrategy]
    results: dict[tuple[int, SyncStrategy, int], list[tuple[float, list[float]]]] = {c: [] for c in configs}
    for r in range(rounds):
        for c, s, per_call in configs:
            path = root / f"spool-{r}-{c}-{s.value}-{per_call}"
            results[(c, s, per_call)].append(await spool_rate(path, n, c, s, per_call))
            shutil.rmtree(path, ignore_errors=True)
    for (c, s, per_call), runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        lags = [lag for _, run_lags in runs for lag in run_lags]
        call = "spool     " if per_call == 1 else f"spool_many({per_call})"
        print(
            f"store.{call:<15} {c:>4} callers, {s.value:<6} {rate:>10,.0f} msg/s {rate / seed:6.1f}x seed; "
            f"{lag_line(lags)}"
        )


def load_pending(path: Path, n: int, *, all_due: bool = False) -> None:
    """n pending keys as spool writes them (value + index); the first DUE_AT_HEAD (or all) due."""

    def record_due(i: int) -> tuple[RetryRecord, int]:
        # incompressible bodies, so disk and cache sizes are real
        due = BASE_MS - n + i if all_due or i < DUE_AT_HEAD else BASE_MS + 1000 + i
        return rec(i, os.urandom(len(BODY))), due

    fill_pending(path, n, record_due)


def tick_us(store: RetryStore, cursor: bytes, now: int, reps: int = 200) -> float:
    """Median cost of one seek pass as ReplayLoop does it: due keys up to the queue bound + next due."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        rows = store.due(cursor, now, 128)
        store.first_pending(rows[-1][0] + b"\x00" if rows else cursor)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def lag_line(lags: list[float]) -> str:
    ordered = sorted(lags) or [0.0]

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3

    return f"loop lag p50 {pick(0.5):.2f} ms, p99 {pick(0.99):.2f} ms, max {ordered[-1] * 1e3:.2f} ms"


RSS_CHILD = """
import asyncio, resource, sys
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore

def resident_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024

async def main():
    store = RetryStore.open(sys.argv[1], now_ms=lambda: int(sys.argv[2]))
    async def deliver(record):
        return None
    loop = ReplayLoop(store, deliver, lambda t: RetryPolicy(), workers=64)
    await loop.start()
    await loop.wait_idle()
    resident = resident_mb()
    await loop.close()
    pending = store.pending_count
    await store.close()
    print(pending, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, resident)

asyncio.run(main())
"""


def peak_rss_mb(path: Path) -> tuple[int, int, int]:
    """A fresh process opens the store with everything pending (counting keys), replays the due
    head; returns (pending, peak RSS MB, resident MB once idle)."""
    out = child_output("-c", RSS_CHILD, str(path), str(BASE_MS)).split()
    return int(out[0]), int(out[1]), int(out[2])


async def spool_to_attempt(path: Path, n: int) -> list[float]:
    """ack=spool mode: seconds from a due-now spool() call to the loop's first attempt at it."""
    store = RetryStore.open(path)
    started: dict[str, float] = {}
    latencies: list[float] = []
    done = asyncio.Event()

    async def deliver(record: RetryRecord) -> None:
        latencies.append(time.perf_counter() - started[record.id])
        if len(latencies) == n:
            done.set()

    loop = ReplayLoop(store, deliver, lambda _t: RetryPolicy(), workers=16)
    await loop.start()
    records = [rec(i) for i in range(n)]

    async def spool(i: int) -> None:
        started[records[i].id] = time.perf_counter()
        await store.spool(records[i])
        await asyncio.sleep(0.002)  # a steady trickle (about 8 000/s), not one burst

    await concurrent(n, 16, spool)
    await asyncio.wait_for(done.wait(), 60)
    await loop.close()
    await store.close()
    return latencies


async def replay_all(path: Path, workers: int) -> tuple[float, int, bytes, RetryStore]:
    """Replay every pending key into a no-op deliver. Returns (msg/s, delivered, the loop's cursor,
    the store, still open: its memtables hold the tombstones of what was just delivered)."""
    far = BASE_MS + 10**10
    store = RetryStore.open(path, now_ms=lambda: far)
    done = 0

    async def deliver(record: RetryRecord) -> None:
        nonlocal done
        done += 1

    loop = ReplayLoop(store, deliver, lambda _t: RetryPolicy(), workers=workers)
    started = time.perf_counter()
    await loop.start()
    await loop.wait_idle()
    elapsed = time.perf_counter() - started
    cursor = loop._cursor  # the bench reads where the loop's cursor stopped
    await loop.close()
    return done / elapsed, done, cursor, store


async def replay_into_devbroker(root: Path, n: int) -> list[tuple[str, float]]:
    """Replay into a devbroker process (its own core), one message per send and with send_batch,
    each next to the producer's own rate for the same sends without the store, in the same run."""
    from bench.common import bench_producer, devbroker_process
    from rocksidecar.rmq import Message

    rows: list[tuple[str, float]] = []
    with devbroker_process() as dev:
        client, producer = await bench_producer(dev.namesrv, warm_topic="bench", warm_body=BODY)

        def message(record: RetryRecord) -> Message:
            return Message(record.topic, record.body, id=record.id)

        async def deliver(record: RetryRecord) -> None:
            await producer.send(message(record))

        async def deliver_batch(records: Sequence[RetryRecord]) -> Sequence[object]:
            return await producer.send_batch([message(r) for r in records])

        for label, workers, batch in (("send", 64, None), ("send_batch(32)", 8, deliver_batch)):
            path = root / f"devbroker-{workers}"
            load_pending(path, n, all_due=True)
            store = RetryStore.open(path, now_ms=lambda: BASE_MS)
            loop = ReplayLoop(store, deliver, lambda _t: RetryPolicy(), workers=workers, deliver_batch=batch)
            started = time.perf_counter()
            await loop.start()
            await loop.wait_idle()
            rate = n / (time.perf_counter() - started)
            assert store.kv.count(PENDING_CF) == 0, "replay left messages behind"
            await loop.close()
            await store.close()
            if batch is None:
                direct, _ = await concurrent(
                    n // 64 * 64, 64, lambda i: producer.send(Message("bench", BODY))
                )
            else:
                chunk = [Message("bench", BODY) for _ in range(32)]

                def send_chunk(_: int, chunk: list[Message] = chunk) -> Awaitable[object]:
                    return producer.send_batch(chunk)

                direct, _ = await concurrent(n // 32 // 8 * 8, 8, send_chunk)
                direct *= 32
            rows += [(f"producer alone, {label}, {workers} in flight", direct), (f"replay via {label}", rate)]
        await producer.close()
        await client.close()
    return rows


async def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--pending", type=int, default=1_000_000, help="keys for the large store")
    parser.add_argument("--spill", type=int, default=200_000, help="messages per spill measurement")
    parser.add_argument("--seed-puts", type=int, default=3_000, help="synced puts for the seed pattern")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each spill configuration")
    parser.add_argument("--devbroker-messages", type=int, default=100_000)
    parser.add_argument("--no-devbroker", action="store_true", help="skip the replay into devbroker")
    parser.add_argument("--dir", help="scratch directory (default: a temporary one on the same disk as /tmp)")
    parser.add_argument("--asyncio", action="store_true", help="plain asyncio instead of uvloop")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="retry-bench-"))
    os.makedirs(root, exist_ok=True)
    loop_kind = "asyncio" if args.asyncio else "uvloop"
    print(f"# retry store benchmark: {environment()} at start, {loop_kind}, scratch {root}")
    try:
        await run(args, root)
    finally:
        print(f"# load average {os.getloadavg()[0]:.2f} at end")
        shutil.rmtree(root, ignore_errors=True)


async def run(args: argparse.Namespace, root: Path) -> None:
    print("\n## spill (256-byte bodies)")
    seed = seed_rate(root / "seed", args.seed_puts)
    print(f"one synced put per message (seed)                  {seed:>10,.0f} msg/s")
    raw = await writer_rate(root / "writer", args.spill, 1024)
    print(f"group commit, writer only, 1 put/msg, 1024 callers {raw:>10,.0f} msg/s {raw / seed:6.1f}x seed")
    print(f"(median of {args.rounds} interleaved rounds of {args.spill:,} messages each)")
    await spill(root, args.spill, seed, args.rounds)

    print("\n## ack=spool: from a due-now spool() call to the first attempt (16 callers, real clock)")
    lat = sorted(await spool_to_attempt(root / "latency", 4_000))
    p50, p99 = lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3
    print(f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {lat[-1] * 1e3:.2f} ms (the synced write included)")

    print(f"\n## seek tick ({DUE_AT_HEAD} due keys at the head, the rest due later)")
    small, large = root / "small", root / "large"
    load_pending(small, 1_000)
    started = time.perf_counter()
    load_pending(large, args.pending)
    print(f"(loaded {args.pending:,} pending keys in {time.perf_counter() - started:.1f} s)")
    ticks = {}
    for name, path in (("small", small), ("large", large)):
        store = RetryStore.open(path, now_ms=lambda: BASE_MS)
        ticks[name] = tick_us(store, b"", BASE_MS)
        await store.close()
    ratio = ticks["large"] / ticks["small"]
    print(f"tick with 1,000 pending                      {ticks['small']:>10.1f} us")
    print(f"tick with {args.pending:>9,} pending            {ticks['large']:>10.1f} us  ratio {ratio:.2f}")

    print("\n## peak RSS (a fresh process: open and count, start the loop, replay the due head)")
    started = time.perf_counter()
    pending, peak, resident = peak_rss_mb(large)
    took = time.perf_counter() - started
    print(f"{pending:,} pending: peak {peak} MB (ru_maxrss), resident once idle {resident} MB; {took:.1f} s")

    print(f"\n## replay into an in-process no-op deliver, {args.pending:,} keys")
    rate, delivered, cursor, store = await replay_all(large, workers=64)
    print(
        f"replay, 64 workers                           {rate:>10,.0f} msg/s ({delivered:,} delivered+deleted)"
    )

    print(f"\n## seek tick right after {delivered:,} delivered-and-deleted keys (1,000 pending behind them)")
    now = BASE_MS + 10**10
    records = [rec(10**9 + i) for i in range(1_000)]
    await store.spool_many(records[:DUE_AT_HEAD], now - 1)  # due after the deleted range
    await store.spool_many(records[DUE_AT_HEAD:], now + 1000)
    print(f"from the loop's cursor                       {tick_us(store, cursor, now):>10.1f} us")
    print(f"from the store's floor                       {tick_us(store, store.floor, now):>10.1f} us")
    print(f"from the first key (the seed's SeekToFirst)  {tick_us(store, b'', now, reps=5):>10.1f} us")
    floor = store.floor
    await store.close()  # RocksDB flushes the memtables on a clean close

    kv = RocksKV.open(large, COLUMN_FAMILIES)
    store = RetryStore(kv, now_ms=lambda: now)
    print(f"reopened: from the persisted floor           {tick_us(store, store.floor, now):>10.1f} us")
    print(f"reopened: from the first key                 {tick_us(store, b'', now, reps=5):>10.1f} us")
    await asyncio.sleep(3)  # the deletion collector marks the flushed files; RocksDB compacts them
    print(f"3 s later: from the first key                {tick_us(store, b'', now, reps=20):>10.1f} us")
    started = time.perf_counter()
    kv.compact(PENDING_CF, None, floor)
    took = time.perf_counter() - started
    print(f"after compact_range: from the first key      {tick_us(store, b'', now):>10.1f} us ({took:.2f} s)")
    await store.close()
    kv.close()

    if not args.no_devbroker:
        n = args.devbroker_messages
        print(f"\n## replay into devbroker (its own process), {n:,} messages")
        rows = await replay_into_devbroker(root, n)
        for i, (label, msgs) in enumerate(rows):
            versus = f"  {msgs / rows[i - 1][1]:.2f}x the producer alone" if i % 2 else ""
            print(f"{label:<44} {msgs:>10,.0f} msg/s{versus}")
    print(f"\nbench process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    if "--asyncio" in sys.argv:
        asyncio.run(main())
    else:
        import uvloop

        uvloop.run(main())
