"""Rows/s of a local[2] Spark job writing through the sidecar (format "rocksidecar") into devbroker,
next to the sidecar's own batch rate in the same run: an async httpx client posting batches of the same
size and body length straight to /v1/messages:batch.

    .venv/bin/python -m bench.spark_publish [--rows 100000] [--size 256] [--batch-size 500] [--rounds 3]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import orjson
import uvloop

from bench.common import Row, bench_parser, devbroker_process, environment, print_rows
from bench.sidecar_process import sidecar_process

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


async def direct_rate(url: str, topic: str, rows: int, size: int, batch_size: int, in_flight: int) -> float:
    """Messages/s posting ``rows`` messages in batches, ``in_flight`` requests at a time."""
    pad = "x" * max(size - 12, 0)
    bodies = [
        orjson.dumps(
            {
                "messages": [
                    {"topic": topic, "body": f"{b * batch_size + i:012d}{pad}"} for i in range(batch_size)
                ]
            }
        )
        for b in range(rows // batch_size)
    ]
    sem = asyncio.Semaphore(in_flight)
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def post(body: bytes) -> None:
            async with sem:
                resp = await client.post(
                    "/v1/messages:batch", content=body, headers={"Content-Type": "application/json"}
                )
                resp.raise_for_status()
                assert resp.json()["sent"] == batch_size, resp.text[:300]

        await post(bodies[0])  # warm-up: route and connections
        started = time.perf_counter()
        await asyncio.gather(*(post(b) for b in bodies[1:]))
        return (len(bodies) - 1) * batch_size / (time.perf_counter() - started)


def spark_rate(
    spark: SparkSession, url: str, topic: str, rows: int, size: int, batch_size: int, partitions: int
) -> float:
    """Rows/s of df.write.format("rocksidecar").save() for a generated DataFrame of ``rows`` rows."""
    from pyspark.sql import functions as F

    df = spark.range(0, rows, 1, numPartitions=partitions).select(
        F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit("x" * max(size - 12, 0))).alias("body")
    )
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        started = time.perf_counter()
        (
            df.write.format("rocksidecar")
            .mode("append")
            .option("topic", topic)
            .option("endpoint", url)
            .option("batchSize", str(batch_size))
            .option("reportPath", str(report))
            .save()
        )
        elapsed = time.perf_counter() - started
        summary = json.loads(report.read_text().splitlines()[-1])
    assert summary["sent"] == rows, summary
    return rows / elapsed


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256, help="body bytes")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="each figure is the median of this many")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from rocksidecar.pipeline.datasource import register

    print(f"Spark publish, {args.rows} rows of {args.size} B, batches of {args.batch_size}; {environment()}")
    samples: dict[str, list[float]] = {}
    with (
        devbroker_process(max_log_mb=4096) as dev,
        tempfile.TemporaryDirectory() as data,
        sidecar_process(dev.namesrv, Path(data)) as (url, _),
    ):
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        measures: dict[str, Callable[[], float]] = {
            "sidecar batch rate: httpx, 2 batches in flight": lambda: uvloop.run(
                direct_rate(url, "BenchDirect", args.rows, args.size, args.batch_size, 2)
            ),
            "sidecar batch rate: httpx, 8 batches in flight": lambda: uvloop.run(
                direct_rate(url, "BenchDirect", args.rows, args.size, args.batch_size, 8)
            ),
            "Spark local[2] -> sidecar, 2 partitions": lambda: spark_rate(
                spark, url, "BenchSpark", args.rows, args.size, args.batch_size, 2
            ),
            "Spark local[2] -> sidecar, 4 partitions": lambda: spark_rate(
                spark, url, "BenchSpark", args.rows, args.size, args.batch_size, 4
            ),
        }
        try:
            spark_rate(spark, url, "BenchSpark", 2000, args.size, args.batch_size, 2)  # start the workers
            for _ in range(args.rounds):  # interleaved, so a noisy neighbour hits every figure alike
                for name, measure in measures.items():
                    samples.setdefault(name, []).append(measure())
        finally:
            spark.stop()
    figures = {name: statistics.median(values) for name, values in samples.items()}
    anchor = figures["sidecar batch rate: httpx, 2 batches in flight"]
    print_rows(
        f"rows/s, median of {args.rounds} (ratio to the sidecar's batch rate with 2 in flight, same run)",
        [Row(name, value, "rows/s", anchor) for name, value in figures.items()],
    )
    print(f"after the run: {environment()}")


if __name__ == "__main__":
    main()
