"""Transactions (begin + commit) per second against plain sends, same run (issue 29).

Both go through one producer to the same brokers with the same number in flight. A transaction is what
the sidecar does for POST /v1/transactions and :commit: a half send, a synced record (RocksDB, group
commit), a synced decision and an awaited END_TRANSACTION. The anchor is plain sends of the same messages.
Rounds alternate (plain, transactions, plain, ...) so that the load of a shared machine hits both alike;
besides the best rate of each side, the CPU time of this process (user + system, every thread: the
client, the store and its syncs; devbroker runs in a process of its own) per operation, the median of
the rounds, is printed: it moves much less with other processes' load than the rates do.

    .venv/bin/python -m bench.transactions [--count 3000] [--inflight 64] [--rounds 3] [--namesrv HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from bench.common import (
    Row,
    bench_parser,
    bench_producer,
    environment,
    namesrv_or_devbroker,
    print_rows,
    rate_and_cpu,
)
from rocksidecar.app.transactions.coordinator import TransactionCoordinator
from rocksidecar.app.transactions.records import CF, Decision, TransactionRecords
from rocksidecar.rmq import Message
from rocksidecar.rmq.producer.transaction import TransactionProducer
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.rocks import RocksKV


async def run(namesrv: str, count: int, inflight: int, rounds: int) -> list[Row]:
    topic = f"BenchTx{int(time.time())}"
    client, producer = await bench_producer(namesrv, warm_topic=topic)
    body = b"x" * 256
    tx = TransactionProducer(producer, "bench_tx")
    tx.start()
    with tempfile.TemporaryDirectory(prefix="bench-tx-") as tmp:
        kv = RocksKV.open(tmp, [CF])
        writer = GroupCommitWriter(kv)
        coordinator = TransactionCoordinator(TransactionRecords(kv, writer), tx, None)

        async def plain(i: int) -> object:
            return await producer.send(Message(topic, body))

        async def transaction(i: int) -> object:
            record = await coordinator.begin(Message(topic, body))
            return await coordinator.decide(record.id, Decision.COMMIT)

        sends: list[tuple[float, float]] = []
        txs: list[tuple[float, float]] = []
        try:
            for _ in range(rounds):  # alternate, so that load drifting during the run hits both alike
                sends.append(await rate_and_cpu(count, inflight, plain))
                txs.append(await rate_and_cpu(count, inflight, transaction))
        finally:
            await tx.close()
            await producer.close()
            await client.close()
            await writer.close()
            kv.close()
    anchor = max(r for r, _ in sends)
    cpu_anchor = statistics.median(c for _, c in sends)
    for i, (send, tx_) in enumerate(zip(sends, txs, strict=True)):
        print(f"  round {i + 1}: plain {send[0]:,.0f} msg/s {send[1]:,.0f} us CPU/msg; "
              f"begin + commit {tx_[0]:,.0f} tx/s {tx_[1]:,.0f} us CPU/tx")  # fmt: skip
    return [
        Row(f"plain send, {inflight} in flight (anchor)", anchor, "msg/s", anchor),
        Row(f"begin + commit, {inflight} in flight", max(r for r, _ in txs), "tx/s", anchor),
        Row("CPU per plain send (median of rounds, anchor)", cpu_anchor, "us", cpu_anchor),
        Row(
            "CPU per begin + commit (median of rounds)",
            statistics.median(c for _, c in txs),
            "us",
            cpu_anchor,
        ),
    ]


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
