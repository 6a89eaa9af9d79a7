"""Send throughput of the client: single sends (one and many in flight) and batch sends, against
devbroker and, with --namesrv, a real broker; ratios to RocketMQ's Java benchmark producer (sync, 8
threads, 256 B) measured in the same run. Targets (issue 2): batch >= 1.5x, concurrent single >= 0.5x.

    .venv/bin/python -m bench.send_throughput [--namesrv 127.0.0.1:9876] [--java-ctl PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import uvloop

from bench.common import (
    DEFAULT_CTL,
    Row,
    add_options,
    bench_parser,
    bench_producer,
    devbroker_process,
    environment,
    java_producer_tps,
    print_rows,
)
from rocksidecar.rmq import Message


async def measure(
    namesrv: str, topic: str, *, size: int, singles: int, concurrency: int, batches: int, batch_size: int
) -> dict[str, float]:
    client, producer = await bench_producer(namesrv)
    body = b"x" * size
    out: dict[str, float] = {}
    try:
        for _ in range(200):  # warm up: routes, connections, topic auto-creation on every broker
            await producer.send(Message(topic, body))
        n = max(singles // 10, 500)
        started = time.perf_counter()
        for _ in range(n):
            await producer.send(Message(topic, body))
        out["single, 1 in flight"] = n / (time.perf_counter() - started)

        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                await producer.send(Message(topic, body))

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(singles)))
        out[f"single, {concurrency} in flight"] = singles / (time.perf_counter() - started)

        batch = [Message(topic, body) for _ in range(batch_size)]
        bsem = asyncio.Semaphore(8)

        async def many() -> None:
            async with bsem:
                results = await producer.send_batch(batch)
                assert all(not isinstance(r, Exception) for r in results), results[:1]

        started = time.perf_counter()
        await asyncio.gather(*(many() for _ in range(batches)))
        out[f"batch of {batch_size}, 8 in flight"] = batches * batch_size / (time.perf_counter() - started)
    finally:
        await producer.close()
        await client.close()
    return out


def run_against(label: str, namesrv: str, java: float | None, args: argparse.Namespace) -> list[Row]:
    figures = uvloop.run(
        measure(
            namesrv,
            f"RsBench_{int(time.time())}",
            size=args.size,
            singles=args.singles,
            concurrency=args.concurrency,
            batches=args.batches,
            batch_size=args.batch_size,
        )
    )
    rows = [Row(f"{label}: {name}", value, "msg/s", java) for name, value in figures.items()]
    if java:
        rows.insert(0, Row(f"{label}: Java benchmark Producer (anchor)", java, "msg/s", java))
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--namesrv", help="a real RocketMQ name server (also measured with Java)")
    parser.add_argument(
        "--java-ctl", type=Path, default=DEFAULT_CTL, help="real-broker.sh, for the Java anchor"
    )
    add_options(parser, java_quantity=300_000, size=256, singles=60_000, concurrency=64)
    add_options(parser, batches=2000, batch_size=100, no_devbroker=False)
    args = parser.parse_args()
    print(f"send throughput, {args.size} B bodies; {environment()}")
    rows: list[Row] = []
    if args.namesrv:
        java = None
        if args.java_ctl.is_file():
            java = java_producer_tps(
                args.namesrv,
                args.java_ctl,
                topic=f"RsBenchJava_{int(time.time())}",
                size=args.size,
                quantity=args.java_quantity,
            )
        rows += run_against("real RocketMQ 4.9.4", args.namesrv, java, args)
    if not args.no_devbroker:
        with devbroker_process() as dev:
            java = None
            if args.java_ctl.is_file():  # the Java producer runs against devbroker too: same protocol
                java = java_producer_tps(
                    dev.namesrv,
                    args.java_ctl,
                    topic="RsBenchJava",
                    size=args.size,
                    quantity=args.java_quantity,
                )
            rows += run_against("devbroker", dev.namesrv, java, args)
    print_rows("msg/s (ratio to the Java producer in the same run)", rows)


if __name__ == "__main__":
    main()
