"""Rows per second and CPU per message of a batch read with the rocksidecar Spark source (local[2])
against RocketMQ's own benchmark Consumer on the same topic, in the same run:

    .venv/bin/python -m bench.spark_read --namesrv 127.0.0.1:9876   # real RocketMQ 4.9.4 (Java anchor)

The topic (4 queues a broker, fresh each run) is filled with --messages bodies of --size bytes. The Spark
rate is messages / wall time of a query that reads every body (sum of lengths), run --queries times on the
same session after a warm-up query (the JVM and the Python workers started); its CPU is what the Spark JVM
and its Python workers used during that query. The first read pays the JVM's JIT for the new code; the
ratio is taken on the median read (the anchor, too, is a steady-state window); both are printed. The
anchor is bench.consume's java_rate (best 10 s window of the 20-thread Java Consumer: the ratio errs low)
and the CPU of its whole run (JVM start-up included: that ratio errs high for us). On a machine shared
with other work the rates swing with the load; the CPU per message much less. Target >= 0.5x."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

from bench.common import bench_parser, environment, tree_cpu_seconds
from bench.consume import fill, java_rate


def spark_rates(namesrv: str, topic: str, total: int, queries: int) -> list[tuple[float, float]]:
    """(messages per second, CPU seconds of the Spark JVM and its Python workers) of each timed query,
    one after another on the same session."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from rocksidecar.pipeline import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    try:
        df = spark.read.format("rocksidecar").option("namesrv", namesrv).option("topic", topic).load()
        df.limit(10).collect()  # warm-up: workers started, connections made
        out = []
        for _ in range(queries):
            cpu0, start = tree_cpu_seconds(jvm), time.perf_counter()
            [row] = df.select(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes")).collect()
            took, cpu = time.perf_counter() - start, tree_cpu_seconds(jvm) - cpu0
            if row.n != total:
                raise RuntimeError(f"read {row.n} messages, the topic has {total}")
            out.append((total / took, cpu))
    finally:
        spark.stop()
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--queries", type=int, default=3, help="timed full reads, one after another")
    parser.add_argument(
        "--java",
        default=os.environ.get("ROCKSIDECAR_TEST_BROKER_CTL", "/work/shared/rocketmq/real-broker.sh"),
    )
    args = parser.parse_args()
    topic = f"spark_bench_read_{time.time_ns() % 10**9}"
    print(f"# spark read benchmark: {environment()}, broker at {args.namesrv}, topic {topic}")
    print(f"# load average at the start: {os.getloadavg()[0]:.1f}")
    asyncio.run(fill(args.namesrv, args.messages, args.size, topic))
    runs = spark_rates(args.namesrv, topic, args.messages, args.queries)
    per = 1e6 / args.messages
    for i, (rate, cpu) in enumerate(runs, 1):
        print(
            f"rocksidecar Spark source, batch read {i}, local[2]: {rate:,.0f} msg/s, "
            f"{cpu * per:.0f} us CPU/msg"
        )
    first, first_cpu = runs[0]
    ours, our_cpu = statistics.median_low(runs)  # the query of the median rate
    print(
        f"rocksidecar Spark source, first read: {first:,.0f} msg/s, {first_cpu * per:.0f} us CPU/msg; "
        f"median of {len(runs)}: {ours:,.0f} msg/s, {our_cpu * per:.0f} us CPU/msg"
    )
    java_cpu: list[float] = []
    anchor = asyncio.run(java_rate(args.namesrv, args.messages, args.java, topic, java_cpu))
    print(
        f"Java benchmark Consumer (4.9.4, 20 threads), best 10 s window: {anchor:,.0f} msg/s, "
        f"{java_cpu[0] * per:.0f} us CPU/msg (whole run)"
    )
    print(f"# load average at the end: {os.getloadavg()[0]:.1f}")
    print(
        f"ratio, median read: {ours / anchor:.2f}x (target >= 0.5x); CPU per message "
        f"{our_cpu / java_cpu[0]:.2f}x Java's; first read {first / anchor:.2f}x"
    )


if __name__ == "__main__":
    main()
