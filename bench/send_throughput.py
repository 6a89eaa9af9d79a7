"""Send throughput of the client: single sends (one and many in flight) and batch sends, against
devbroker and, with --namesrv, a real broker; ratios to RocketMQ's Java benchmark producer (sync, 8
threads, 256 B) measured in the same run. Targets (issue 2): batch >= 1.5x, concurrent single >= 0.5x.

    .venv/bin/python -m bench.send_throughput [--namesrv 127.0.0.1:9876] [--java-ctl PATH]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import uvloop

from bench.common import (
    DEFAULT_CTL,
    Row,
    bench_parser,
    bench_producer,
    environment,
    java_producer_tps,
    print_rows,
    rate,
    targets,
)
from rocksidecar.rmq import Message


@dataclass(frozen=True)
class SendLoad:
    """What ``measure`` sends: the body size, single sends (1 and ``concurrency`` in flight) and batches."""

    size: int = 256
    singles: int = 60_000
    concurrency: int = 64
    batches: int = 2000
    batch_size: int = 100


async def measure(namesrv: str, topic: str, load: SendLoad) -> dict[str, float]:
    body = b"x" * load.size
    client, producer = await bench_producer(namesrv, warm_topic=topic, warm_body=body)
    batch = [Message(topic, body) for _ in range(load.batch_size)]

    async def one(_i: int) -> None:
        await producer.send(Message(topic, body))

    async def many(_i: int) -> None:
        results = await producer.send_batch(batch)
        assert all(not isinstance(r, Exception) for r in results), results[:1]

    out: dict[str, float] = {}
    try:
        out["single, 1 in flight"] = await rate(max(load.singles // 10, 500), 1, one)
        out[f"single, {load.concurrency} in flight"] = await rate(load.singles, load.concurrency, one)
        out[f"batch of {load.batch_size}, 8 in flight"] = load.batch_size * await rate(load.batches, 8, many)
    finally:
        await producer.close()
        await client.close()
    return out


def run_against(label: str, namesrv: str, java: float | None, args: argparse.Namespace) -> list[Row]:
    load = SendLoad(**{f.name: getattr(args, f.name) for f in fields(SendLoad)})
    figures = uvloop.run(measure(namesrv, f"RsBench_{int(time.time())}", load))
    rows = [Row(f"{label}: {name}", value, "msg/s", java) for name, value in figures.items()]
    if java:
        rows.insert(0, Row(f"{label}: Java benchmark Producer (anchor)", java, "msg/s", java))
    return rows


def main() -> None:
    parser = bench_parser(__doc__, java_quantity=300_000, **asdict(SendLoad()), no_devbroker=False)
    parser.add_argument("--namesrv", help="a real RocketMQ name server (also measured with Java)")
    parser.add_argument(
        "--java-ctl", type=Path, default=DEFAULT_CTL, help="real-broker.sh, for the Java anchor"
    )
    args = parser.parse_args()
    print(f"send throughput, {args.size} B bodies; {environment()}")
    rows: list[Row] = []
    for label, namesrv in targets(args.namesrv, not args.no_devbroker):
        java = None
        if args.java_ctl.is_file():  # the Java producer runs against devbroker too: same protocol
            java = java_producer_tps(
                namesrv,
                args.java_ctl,
                topic=f"RsBenchJava_{int(time.time())}",
                size=args.size,
                quantity=args.java_quantity,
            )
        rows += run_against(label, namesrv, java, args)
    print_rows("msg/s (ratio to the Java producer in the same run)", rows)


if __name__ == "__main__":
    main()
