"""The Spark read source's executor side without Spark: CPU per message of the partition function
(pipeline.source.read_range: pulls, decoding, Arrow record batches) over every queue of a topic, in one
process, so its cost can be compared and profiled apart from the Spark JVM's (a diagnostic, no target:
bench.spark_read carries the target and its anchor):

    .venv/bin/python -m bench.spark_read_executor --namesrv 127.0.0.1:9876            # fills a new topic
    .venv/bin/python -m bench.spark_read_executor --namesrv 127.0.0.1:9876 --topic T --profile

The topic (4 queues a broker) is filled with --messages bodies of --size bytes unless --topic names one.
One untimed pass, then --rounds timed passes; CPU is this process's user + system time (process_time),
the rate is messages / wall time. --profile prints the top of a cProfile (CPU-time clock) of one pass."""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import statistics
import time

from bench.common import bench_parser, environment
from bench.consume import fill


def one_pass(namesrv: str, topic: str) -> int:
    from rocksidecar.pipeline import read_options
    from rocksidecar.pipeline.source import BatchReader, read_range

    opts = read_options.parse({"namesrv": namesrv, "topic": topic}, streaming=False)
    return sum(batch.num_rows for qr in BatchReader(opts).ranges for batch in read_range(opts, qr))


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", help="an existing topic to read (default: fill a new one)")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    topic = args.topic or f"spark_bench_exec_{time.time_ns() % 10**9}"
    print(f"# spark read executor benchmark: {environment()}, broker at {args.namesrv}, topic {topic}")
    print(f"# load average at the start: {os.getloadavg()[0]:.1f}")
    if not args.topic:
        asyncio.run(fill(args.namesrv, args.messages, args.size, topic))
    total = one_pass(args.namesrv, topic)  # untimed: imports, first connections
    per_row: list[float] = []
    for i in range(args.rounds):
        cpu0, start = time.process_time(), time.perf_counter()
        n = one_pass(args.namesrv, topic)
        cpu, took = time.process_time() - cpu0, time.perf_counter() - start
        if n != total:
            raise RuntimeError(f"pass {i + 1} read {n} messages, the first {total}")
        per_row.append(cpu / n * 1e6)
        print(f"pass {i + 1}: {n:,} messages, {per_row[-1]:.1f} us CPU/msg, {n / took:,.0f} msg/s")
    print(f"executor read_range, median of {args.rounds}: {statistics.median(per_row):.1f} us CPU/msg")
    print(f"# load average at the end: {os.getloadavg()[0]:.1f}")
    if args.profile:
        profile = cProfile.Profile(time.process_time)
        profile.runcall(one_pass, args.namesrv, topic)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
