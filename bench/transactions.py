"""Transactions (begin + commit) per second against plain sends, same run (issue 29).

Both go through one producer to the same brokers with the same number in flight. A transaction is what
the sidecar does for POST /v1/transactions and :commit: a half send, a synced record (RocksDB, group
commit), a synced decision and an awaited END_TRANSACTION. The anchor is plain sends of the same messages.

    .venv/bin/python -m bench.transactions [--count 3000] [--inflight 64] [--namesrv 127.0.0.1:9876]
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from bench.common import (
    Row,
    bench_parser,
    bench_producer,
    environment,
    namesrv_or_devbroker,
    print_rows,
    rate,
)
from rocksidecar.app.transactions.coordinator import TransactionCoordinator
from rocksidecar.app.transactions.records import CF, Decision, TransactionRecords
from rocksidecar.rmq import Message
from rocksidecar.rmq.producer.transaction import TransactionProducer
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.rocks import RocksKV


async def run(namesrv: str, count: int, inflight: int) -> list[Row]:
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

        try:
            # alternate, so that load drifting during the run hits both alike
            sends = [await rate(count, inflight, plain) for _ in range(1)]
            txs = [await rate(count, inflight, transaction) for _ in range(1)]
            sends.append(await rate(count, inflight, plain))
            txs.append(await rate(count, inflight, transaction))
        finally:
            await tx.close()
            await producer.close()
            await client.close()
            await writer.close()
            kv.close()
    anchor = max(sends)
    return [
        Row(f"plain send, {inflight} in flight (anchor)", anchor, "msg/s", anchor),
        Row(f"begin + commit, {inflight} in flight", max(txs), "tx/s", anchor),
    ]


def main() -> None:
    parser = bench_parser(__doc__, count=3000, inflight=64, namesrv=None)
    args = parser.parse_args()
    print(f"transactions vs plain sends; {environment()}")
    with namesrv_or_devbroker(args.namesrv) as namesrv:
        rows = asyncio.run(run(namesrv, args.count, args.inflight))
    print_rows(f"best of 2 interleaved runs of {args.count} each", rows)


if __name__ == "__main__":
    main()
