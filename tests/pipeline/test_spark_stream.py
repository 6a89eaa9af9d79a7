"""writeStream.format("rocksidecar"): a file source read in two micro-batches lands in the topic exactly
once, although the second micro-batch's task is killed until the query fails and the query is then
restarted from its checkpoint (the replayed micro-batch repeats its Idempotency-Keys)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tests.pipeline.fault_proxy import FaultProxy
from tests.pipeline.sidecar_process import Sidecar

pytestmark = pytest.mark.timeout(300)
ROWS_PER_FILE = 2000


def run_query(spark: SparkSession, source: Path, checkpoint: Path, topic: str, endpoint: str) -> str:
    """Process every file present (one per micro-batch) and stop; returns the query id."""
    stream = spark.readStream.schema("id LONG, body STRING").option("maxFilesPerTrigger", 1).json(str(source))
    query = (
        stream.writeStream.format("rocksidecar")
        .option("topic", topic)
        .option("endpoint", endpoint)
        .option("batchSize", "500")
        .option("retryBackoffMax", "0.05")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return str(query.id)


def test_two_micro_batches_exactly_once_through_task_kills_and_a_restart(
    spark: SparkSession, sidecar: Sidecar, proxy: tuple[FaultProxy, str], topic: str, tmp_path: Path
) -> None:
    fault, url = proxy
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    bodies: list[str] = []
    for f in range(2):
        texts = [f"file{f}-row{i}" for i in range(ROWS_PER_FILE)]
        lines = (json.dumps({"id": f * ROWS_PER_FILE + i, "body": t}) + "\n" for i, t in enumerate(texts))
        (source / f"part-{f}.json").write_text("".join(lines))
        bodies += texts
    # micro-batch 1's second request is stored by the sidecar, then its task's worker is killed: three
    # times, so Spark gives up on the task and the query fails after micro-batch 0 committed
    fault.kill_on[":e1:p0:b1"] = 3
    with pytest.raises(StreamingQueryException):
        run_query(spark, source, checkpoint, topic, url)
    assert len(fault.killed) == 3
    first_run = dict(fault.keys)
    assert [first_run[k] for k in sorted(first_run) if ":e0:" in k] == [1, 1, 1, 1]
    query_id = next(iter(first_run)).split(":e0:")[0]
    # the restart replays micro-batch 1 under the same query id and batch id, so the same keys
    assert run_query(spark, source, checkpoint, topic, url) == query_id
    assert {k: n for k, n in fault.keys.items() if ":e1:" in k} == {
        f"{query_id}:e1:p0:b0": 4,
        f"{query_id}:e1:p0:b1": 4,
        f"{query_id}:e1:p0:b2": 1,
        f"{query_id}:e1:p0:b3": 1,
    }
    stored = sidecar.pull(topic)
    assert sorted(m.body.decode() for m in stored) == sorted(bodies)  # every row, each exactly once
