"""Transactions (begin + commit) per second against plain sends, same run (issue 29).

All go through one producer to the same brokers with the same number in flight. A broker-mode
transaction is what the sidecar does for POST /v1/transactions and :commit: a half send, a synced record
(RocksDB, group commit), a synced decision and an awaited END_TRANSACTION. A local-outbox one (mode
local) is a synced record with the message, a synced decision and a synced spool into the retry store
(delivered later by the replay loop, not measured here). The anchor is plain sends of the same messages.
Beside each rate, this process's CPU (user + system) per operation: the steadier figure on a busy machine.

    .venv/bin/python -m bench.transactions [--count 3000] [--inflight 64] [--namesrv 127.0.0.1:9876]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable

from bench.common import (
    Row,
    add_options,
    bench_parser,
    bench_producer,
    devbroker_process,
    environment,
    print_rows,
)
from rocksidecar.app.transactions.coordinator import LocalOutbox, TransactionCoordinator
from rocksidecar.app.transactions.records import CF, Decision, TransactionRecords
from rocksidecar.retry import RetryStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq import Message
from rocksidecar.rmq.producer.transaction import TransactionProducer
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.rocks import RocksKV


async def rate(count: int, inflight: int, one: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    """(operations per second, CPU microseconds of this process per operation) of ``count`` calls of
    ``one``, ``inflight`` at a time."""
    sem = asyncio.Semaphore(inflight)

    async def bounded(i: int) -> None:
        async with sem:
            await one(i)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(bounded(i) for i in range(count)))
    return count / (time.perf_counter() - started), (time.process_time() - cpu) / count * 1e6


async def run(namesrv: str, count: int, inflight: int) -> list[Row]:
    topic = f"BenchTx{int(time.time())}"
    client, producer = await bench_producer(namesrv, warm_topic=topic)
    body = b"x" * 256
    tx = TransactionProducer(producer, "bench_tx")
    tx.start()
    with tempfile.TemporaryDirectory(prefix="bench-tx-") as tmp:
        kv = RocksKV.open(tmp, [CF, *RETRY_CFS])
        writer = GroupCommitWriter(kv)
        records = TransactionRecords(kv, writer)
        broker_mode = TransactionCoordinator(records, tx, None)
        outbox = LocalOutbox(RetryStore(kv, writer=writer), lambda _type: RetryPolicy())
        local_mode = TransactionCoordinator(records, tx, None, mode="local", outbox=outbox)

        async def plain(i: int) -> object:
            return await producer.send(Message(topic, body))

        def transaction(coordinator: TransactionCoordinator) -> Callable[[int], Awaitable[object]]:
            async def one(i: int) -> object:
                record = await coordinator.begin(Message(topic, body))
                return await coordinator.decide(record.id, Decision.COMMIT)

            return one

        kinds = {"plain": plain, "broker": transaction(broker_mode), "local": transaction(local_mode)}
        runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
        try:
            for _round in range(2):  # interleaved, so that load drifting during the run hits all alike
                for kind, one in kinds.items():
                    runs[kind].append(await rate(count, inflight, one))
        finally:
            await tx.close()
            await producer.close()
            await client.close()
            await writer.close()
            kv.close()
    best = {kind: max(r) for kind, r in runs.items()}  # the faster run, with its CPU
    (anchor, anchor_cpu), (broker, broker_cpu), (local, local_cpu) = (
        best["plain"],
        best["broker"],
        best["local"],
    )
    return [
        Row(f"plain send, {inflight} in flight (anchor)", anchor, "msg/s", anchor),
        Row(f"begin + commit, broker mode, {inflight} in flight", broker, "tx/s", anchor),
        Row(f"begin + commit, local outbox, {inflight} in flight", local, "tx/s", anchor),
        Row("CPU per plain send (anchor)", anchor_cpu, "us", anchor_cpu),
        Row("CPU per transaction, broker mode", broker_cpu, "us", anchor_cpu),
        Row("CPU per transaction, local outbox", local_cpu, "us", anchor_cpu),
    ]


def main() -> None:
    parser = add_options(bench_parser(__doc__), count=3000, inflight=64, namesrv=None)
    args = parser.parse_args()
    print(f"transactions vs plain sends; {environment()}")
    if args.namesrv:
        rows = asyncio.run(run(args.namesrv, args.count, args.inflight))
    else:
        with devbroker_process() as dev:
            rows = asyncio.run(run(dev.namesrv, args.count, args.inflight))
    print_rows(f"best of 2 interleaved runs of {args.count} each", rows)


if __name__ == "__main__":
    main()
