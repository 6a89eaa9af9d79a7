"""CPU cost per message of the stores' hot paths, in process CPU time (not wall time), so that two
versions of the code can be compared on a busy shared machine (issue 12: the due-queue engine and
the stored-message codec must not make retry or delay more than 10 % slower).

    .venv/bin/python -m bench.engine_cpu [--n 50000] [--rounds 5]

Each figure is the median over rounds of CPU microseconds per message, on MemoryKV (no disk: the
RocksDB cost did not change and would only add noise):
  codec      encode + decode of a RetryRecord and of a DelayedMessage
  spool      RetryStore.spool_many (100 per call): keys, index entries, encode, the group commit
  replay     ReplayLoop over N due records into a no-op deliver (seek, claim, decode, ack)
  schedule   DelayStore.schedule_many (100 per call)
  publish    DelayScheduler over N due messages into a no-op publish (seek, claim, decode, mark sent)
Run it in each tree (the file only uses public APIs) and compare the medians; results: bench/RESULTS.md.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from bench.common import bench_parser
from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay.message import DelayedMessage, decode_message, encode_message
from rocksidecar.delay.scheduler import DelayScheduler
from rocksidecar.delay.store import DelayStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord, decode_record, encode_record
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.due_loop import DueLoop
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV

BODY = b"x" * 256
NOW_MS = 1_700_000_000_000


def record(i: int) -> RetryRecord:
    return RetryRecord(id=f"C0A80001{i:024X}", topic="bench", body=BODY, properties={"k": "v"})


def delayed(i: int) -> DelayedMessage:
    return DelayedMessage(id=f"C0A80001{i:024X}", topic="bench", body=BODY, due_ms=NOW_MS - 1000)


async def cpu_us(n: int, work: Callable[[], Awaitable[None]]) -> float:
    start = time.process_time()
    await work()
    return (time.process_time() - start) / n * 1e6


async def codec(n: int) -> float:
    records = [record(i) for i in range(n)]
    msgs = [delayed(i) for i in range(n)]

    async def work() -> None:
        for r in records:
            decode_record(encode_record(r))
        for m in msgs:
            decode_message(encode_message(m))

    return await cpu_us(2 * n, work)


async def drain_us(n: int, store: RetryStore | DelayStore, loop: DueLoop) -> float:
    """CPU µs per message for ``loop`` to empty ``store`` of its ``n`` due messages."""

    async def drain() -> None:
        await loop.start()
        await loop.wait_idle()

    took = await cpu_us(n, drain)
    assert store.stats().pending == 0
    await loop.close()
    return took


async def retry_paths(n: int) -> tuple[float, float]:
    store = RetryStore(MemoryKV(RETRY_CFS), now_ms=lambda: NOW_MS)
    records = [record(i) for i in range(n)]

    async def spool() -> None:
        await asyncio.gather(
            *(store.spool_many(records[i : i + 100], NOW_MS - 1000) for i in range(0, n, 100))
        )

    spool_us = await cpu_us(n, spool)

    async def deliver(_: RetryRecord) -> None:
        return None

    replay_us = await drain_us(n, store, ReplayLoop(store, deliver, lambda _: RetryPolicy(), workers=64))
    await store.close()
    return spool_us, replay_us


async def delay_paths(n: int) -> tuple[float, float]:
    kv = MemoryKV(DELAY_CFS)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=lambda: NOW_MS)
    msgs = [delayed(i) for i in range(n)]

    async def schedule() -> None:
        await asyncio.gather(*(store.schedule_many(msgs[i : i + 100]) for i in range(0, n, 100)))

    schedule_us = await cpu_us(n, schedule)

    async def publish(batch: list[DelayedMessage]) -> list[None]:
        return [None] * len(batch)

    publish_us = await drain_us(n, store, DelayScheduler(store, publish))
    await store.close()
    await writer.close()
    return schedule_us, publish_us


async def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--n", type=int, default=50_000, help="messages per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[float]] = {k: [] for k in ("codec", "spool", "replay", "schedule", "publish")}
    for _ in range(args.rounds):
        results["codec"].append(await codec(args.n))
        spool, replay = await retry_paths(args.n)
        results["spool"].append(spool)
        results["replay"].append(replay)
        schedule, publish = await delay_paths(args.n)
        results["schedule"].append(schedule)
        results["publish"].append(publish)
    for name, values in results.items():
        print(f"{name:10s} {statistics.median(values):8.2f} us CPU per message (median of {args.rounds})")


if __name__ == "__main__":
    asyncio.run(main())
