"""RocketMQ -> Spark -> sidecar -> RocketMQ exactly once: a stream reads a topic with the rocksidecar
source and writes it through the sidecar sink with each row's origin (topic/broker/queueId/queueOffset)
as its idColumn; a micro-batch's task is killed until the query fails, and the query restarted from its
checkpoint replays that micro-batch from the same offsets, so its requests carry the same ids and so the
same Idempotency-Keys: the target topic holds each source message once, and says which one it is.
Also: a broker that is down stalls only its own queues."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bench.common import DevbrokerProcess
from rocksidecar.pipeline import origin_column, origin_id
from rocksidecar.pipeline.message import ID_PROPERTY
from rocksidecar.pipeline.publisher import ids_key
from tests.pipeline.fault_proxy import FaultProxy
from tests.pipeline.sidecar_process import Sidecar
from tests.pipeline.source_topics import Put, create, put
from tests.pipeline.test_source_stream import run

pytestmark = pytest.mark.timeout(300)
PER_QUEUE, PER_TRIGGER, BATCH = 30, 20, 5  # 2 queues: micro-batch 0 reads 0-20 of each, batch 1 20-30


def copy(
    spark: SparkSession, namesrv: str, source: str, target: str, endpoint: str, checkpoint: Path
) -> None:
    rows = (
        spark.readStream.format("rocksidecar")
        .option("namesrv", namesrv)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(2 * PER_TRIGGER))
        .load()
        .select(F.upper("body").alias("body"), origin_column().alias("origin"))
    )
    query = (
        rows.writeStream.format("rocksidecar")
        .option("topic", target)
        .option("endpoint", endpoint)
        .option("idColumn", "origin")
        .option("batchSize", str(BATCH))
        .option("retryBackoffMax", "0.05")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_round_trip_exactly_once_through_task_kills_and_a_restart(
    spark: SparkSession,
    devbroker: DevbrokerProcess,
    sidecar: Sidecar,
    proxy: tuple[FaultProxy, str],
    topic: str,
    tmp_path: Path,
) -> None:
    fault, url = proxy
    source, target = f"{topic}_src", f"{topic}_dst"
    create(devbroker, source, 1)
    puts = [Put(b, 0, f"{b}-{i}".encode()) for b in ("broker-a", "broker-b") for i in range(PER_QUEUE)]
    put(devbroker, source, puts)
    # micro-batch 1, partition 0 (broker-a's offsets 20-30): its second request (offsets 25-30) is
    # stored, then its worker is killed, three times: Spark gives up, the query fails after micro-batch 0
    second = [origin_id(source, "broker-a", 0, i) for i in range(PER_TRIGGER + BATCH, PER_QUEUE)]
    fault.kill_on[ids_key("", second)] = 3
    with pytest.raises(StreamingQueryException):
        copy(spark, devbroker.namesrv, source, target, url, tmp_path / "ckpt")
    assert len(fault.killed) == 3
    copy(spark, devbroker.namesrv, source, target, url, tmp_path / "ckpt")
    replayed = [k for k, n in fault.keys.items() if k.endswith(ids_key("", second))]
    assert [fault.keys[k] for k in replayed] == [4]  # the same key on every attempt and after the restart
    stored = sidecar.pull(target)
    assert sorted(m.body for m in stored) == sorted(p.body.upper() for p in puts)  # each exactly once
    ids = {m.body.decode(): m.user_properties[ID_PROPERTY] for m in stored}
    assert ids["BROKER-B-29"] == origin_id(source, "broker-b", 0, 29)
    assert sorted(ids.values()) == sorted(
        origin_id(source, b, 0, i) for b in ("broker-a", "broker-b") for i in range(PER_QUEUE)
    )


def test_a_down_broker_stalls_only_its_queues(
    spark: SparkSession,
    devbroker: DevbrokerProcess,
    topic: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create(devbroker, topic, 1)
    put(
        devbroker, topic, [Put(b, 0, f"{b}-{i}".encode()) for b in ("broker-a", "broker-b") for i in range(3)]
    )
    options = {"startingOffsets": "earliest", "brokerTimeoutMs": "2000"}
    devbroker.act("broker-b", "stop")
    try:
        while_down = run(spark, devbroker, topic, tmp_path / "ckpt", **options)
    finally:
        devbroker.act("broker-b", "start")
    assert sorted(b for batch in while_down for (_, _, _, b) in batch) == [
        b"broker-a-0",
        b"broker-a-1",
        b"broker-a-2",
    ]
    assert (
        any("broker 'broker-b' did not answer" in r.getMessage() for r in caplog.records)
        or not caplog.records
    )
    back = run(spark, devbroker, topic, tmp_path / "ckpt", **options)
    assert sorted(b for batch in back for (_, _, _, b) in batch) == [
        b"broker-b-0",
        b"broker-b-1",
        b"broker-b-2",
    ]
