"""Transactions (begin + commit) per second against plain sends, same run (issue 29).

All go through one producer to the same brokers with the same number in flight. A broker-mode
transaction is what the sidecar does for POST /v1/transactions and :commit: a half send, a synced record
(RocksDB, group commit), a synced decision and an awaited END_TRANSACTION. A local-outbox one (mode
local) is a synced record with the message, a synced decision and a synced spool into the retry store
(delivered later by the replay loop, not measured here). The anchor is plain sends of the same messages.
Rounds alternate (plain, broker, local, plain, ...) so that the load of a shared machine hits all alike;
besides the best rate of each, the CPU time of this process (user + system, every thread: the client,
the store and its syncs; devbroker runs in a process of its own) per operation, the median of the
rounds, is printed: it moves much less with other processes' load than the rates do.

    .venv/bin/python -m bench.transactions [--count 3000] [--inflight 64] [--rounds 3] [--namesrv HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

from bench.common import (
    Row,
    bench_parser,
    bench_producer,
    environment,
    namesrv_or_devbroker,
    print_rows,
    rate_and_cpu,
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

KINDS = {
    "plain": ("plain send ({n} in flight, anchor)", "msg/s", "CPU per plain send (anchor)"),
    "broker": ("begin + commit, broker mode ({n} in flight)", "tx/s", "CPU per transaction, broker mode"),
    "local": ("begin + commit, local outbox ({n} in flight)", "tx/s", "CPU per transaction, local outbox"),
}


async def run(namesrv: str, count: int, inflight: int, rounds: int) -> list[Row]:
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

        calls = {"plain": plain, "broker": transaction(broker_mode), "local": transaction(local_mode)}
        runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in calls}
        try:
            for _ in range(rounds):  # interleaved, so that load drifting during the run hits all alike
                for kind, one in calls.items():
                    runs[kind].append(await rate_and_cpu(count, inflight, one))
        finally:
            await tx.close()
            await producer.close()
            await client.close()
            await writer.close()
            kv.close()
    for i in range(rounds):
        print(
            f"  round {i + 1}: "
            + "; ".join(f"{k} {r[i][0]:,.0f}/s {r[i][1]:,.0f} us CPU" for k, r in runs.items())
        )
    anchor = max(r for r, _ in runs["plain"])
    cpu = {kind: statistics.median(c for _, c in r) for kind, r in runs.items()}
    rows = [
        Row(KINDS[kind][0].format(n=inflight), max(r for r, _ in runs[kind]), KINDS[kind][1], anchor)
        for kind in calls
    ]
    return rows + [Row(KINDS[kind][2], cpu[kind], "us", cpu["plain"]) for kind in calls]


def main() -> None:
    parser = bench_parser(__doc__, count=3000, inflight=64, namesrv=None)
    parser.add_argument("--rounds", type=_rounds, default=3, help="interleaved rounds per side (1-20)")
    args = parser.parse_args()
    print(f"transactions vs plain sends; {environment()}")
    with namesrv_or_devbroker(args.namesrv) as namesrv:
        rows = asyncio.run(run(namesrv, args.count, args.inflight, args.rounds))
    print_rows(f"best rate of {args.rounds} interleaved rounds of {args.count} each; CPU: the median", rows)


def _rounds(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 20:
        raise argparse.ArgumentTypeError(f"--rounds must be 1 to 20, got {value}")
    return value


if __name__ == "__main__":
    main()
