"""df.write.format("rocksidecar") through the real sidecar into devbroker, read back with the RocketMQ
client: every row exactly once, also when a task is killed mid-write and retried or the sidecar answers
503 for a while; rejected rows fail the job naming them; bad options fail on the driver."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.pipeline.fault_proxy import FaultProxy
from tests.pipeline.sidecar_process import Sidecar

pytestmark = pytest.mark.timeout(300)


def numbered(spark: SparkSession, n: int, partitions: int = 2) -> DataFrame:
    """id, body "row-<id>-<hash>", key "k<id>", tags "even"/"odd"."""
    return (
        spark.range(0, n, 1, numPartitions=partitions)
        .withColumn(
            "body", F.concat(F.lit("row-"), F.col("id"), F.lit("-"), F.sha2(F.col("id").cast("string"), 256))
        )
        .withColumn("key", F.concat(F.lit("k"), F.col("id")))
        .withColumn("tags", F.when(F.col("id") % 2 == 0, "even").otherwise("odd"))
    )


def expected_bodies(n: int) -> list[str]:
    return [f"row-{i}-{hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(n)]


def checksum(bodies: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(bodies)).encode()).hexdigest()


def write(df: DataFrame, topic: str, endpoint: str, **options: str) -> None:
    w = df.write.format("rocksidecar").mode("append").option("topic", topic).option("endpoint", endpoint)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def report_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_100k_rows_arrive_exactly_once(
    spark: SparkSession, sidecar: Sidecar, topic: str, tmp_path: Path
) -> None:
    n = 100_000
    report = tmp_path / "report.jsonl"
    write(numbered(spark, n), topic, sidecar.url, keyColumn="key", tagsColumn="tags", reportPath=str(report))
    stored = sidecar.pull(topic)
    expected = expected_bodies(n)
    assert len(stored) == n
    assert checksum([m.body.decode() for m in stored]) == checksum(expected)
    assert len({m.uniq_key for m in stored}) == n
    by_body = {m.body.decode(): m for m in stored}
    for i in (0, 1, 4242, n - 1):
        assert by_body[expected[i]].keys == (f"k{i}",)
        assert by_body[expected[i]].tags == ("even" if i % 2 == 0 else "odd")
    [line] = report_lines(report)
    assert (line["rows"], line["sent"], line["rejected"], line["partitions"], line["aborted"]) == (
        n,
        n,
        0,
        2,
        False,
    )


def test_a_task_killed_mid_write_is_retried_without_loss_or_duplicates(
    spark: SparkSession, sidecar: Sidecar, proxy: tuple[FaultProxy, str], topic: str
) -> None:
    fault, url = proxy
    n, job = 20_000, f"kill-{uuid.uuid4().hex[:8]}"
    # partition 0's batch 3 reaches the sidecar (and is stored), then its Python worker is SIGKILLed
    # before it reads the answer; Spark re-runs the task, which repeats batches 0-3 with their keys
    fault.kill_on[f"{job}:p0:b3"] = 1
    write(numbered(spark, n), topic, url, jobId=job, batchSize="1000")
    assert len(fault.killed) == 1
    assert [fault.keys[f"{job}:p0:b{b}"] for b in range(5)] == [2, 2, 2, 2, 1]
    assert all(fault.keys[f"{job}:p1:b{b}"] == 1 for b in range(10))
    stored = sidecar.pull(topic)
    assert len(stored) == n
    assert checksum([m.body.decode() for m in stored]) == checksum(expected_bodies(n))


def test_a_sidecar_answering_503_for_a_while_is_waited_out(
    spark: SparkSession, sidecar: Sidecar, proxy: tuple[FaultProxy, str], topic: str
) -> None:
    fault, url = proxy
    fault.unavailable, fault.retry_after = 12, "5"  # Retry-After 5 s, capped by retryBackoffMax
    write(numbered(spark, 3000), topic, url, batchSize="500", retryBackoffMax="0.05", maxRetries="20")
    assert fault.answered_503 == 12 and fault.unavailable == 0
    assert sum(fault.keys.values()) == 12 + 6  # every batch got through once the 503s stopped
    stored = sidecar.pull(topic)
    assert checksum([m.body.decode() for m in stored]) == checksum(expected_bodies(3000))
    assert len(stored) == 3000


def test_rejected_rows_fail_the_job_naming_their_indexes(
    spark: SparkSession, sidecar: Sidecar, topic: str, tmp_path: Path
) -> None:
    n = 1000
    # ids 7 and 423 (partition 0: ids 0-499) and 900 (partition 1, its index 400) have empty bodies
    df = numbered(spark, n).withColumn(
        "body", F.when(F.col("id").isin(7, 423, 900), "").otherwise(F.col("body"))
    )
    report = tmp_path / "report.jsonl"
    with pytest.raises(Exception, match="3 of 1000 rows were rejected") as info:
        write(df, topic, sidecar.url, batchSize="100", reportPath=str(report))
    text = str(info.value)
    for where in (
        "partition 0 row 7: the body is empty (column 'body')",
        "partition 0 row 423",
        "partition 1 row 400",
    ):
        assert where in text
    [line] = report_lines(report)
    assert (line["rows"], line["sent"], line["rejected"]) == (n, n - 3, 3)
    assert [(r["partition"], r["row"]) for r in line["rejections"]] == [(0, 7), (0, 423), (1, 400)]
    # the other rows were published
    assert len(sidecar.pull(topic)) == n - 3
    with pytest.raises(Exception, match="partition 1 row id-900: the body is empty"):
        write(
            df.withColumn("rid", F.concat(F.lit("id-"), F.col("id"))),
            topic + "_b",
            sidecar.url,
            rowIdColumn="rid",
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tpoic": "x"}, "unknown option 'tpoic'"),
        ({"topic": "T", "keyColumn": "nope"}, "option keyColumn: no column 'nope'"),
        ({"topic": "T", "batchSize": "0"}, "batchSize='0' must be between 1 and 10000"),
    ],
)
def test_bad_options_fail_on_the_driver_before_any_task(
    spark: SparkSession, options: dict[str, str], message: str
) -> None:
    w = numbered(spark, 10).write.format("rocksidecar").mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    with pytest.raises(Exception, match=message):
        w.save()


def test_overwrite_is_refused(spark: SparkSession) -> None:
    w = numbered(spark, 10).write.format("rocksidecar").mode("overwrite").option("topic", "T")
    with pytest.raises(Exception, match=r"can only append to a topic"):
        w.save()
