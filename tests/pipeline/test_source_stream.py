"""readStream.format("rocksidecar") against devbroker: micro-batches capped by maxOffsetsPerTrigger, a
restart from the checkpoint reads on where the last committed batch ended (nothing twice, nothing lost),
queues added to the topic are picked up, and progress can be committed to a consumer group."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from bench.common import DevbrokerProcess
from rocksidecar.rmq import BrokerApi, MessageQueue, RemotingClient
from tests.pipeline.source_topics import Put, brokers, create, put

pytestmark = pytest.mark.timeout(300)


def run(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str, checkpoint: Path, **options: str
) -> list[list[tuple[str, int, int, bytes]]]:
    """Run the query from ``checkpoint`` with trigger(availableNow=True): it reads what the queues hold
    when it starts, in micro-batches, and ends by itself. Each micro-batch's rows."""
    batches: list[list[tuple[str, int, int, bytes]]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        rows = df.collect()
        if rows:
            batches.append([(r.broker, r.queueId, r.queueOffset, bytes(r.body)) for r in rows])

    r = spark.readStream.format("rocksidecar").option("namesrv", devbroker.namesrv).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, v)
    query = (
        r.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return batches


def committed(devbroker: DevbrokerProcess, topic: str, group: str, broker: str, queue_id: int) -> int | None:
    async def go() -> int | None:
        client = RemotingClient()
        try:
            mq = MessageQueue(topic, broker, queue_id)
            return await BrokerApi(client).query_consumer_offset(brokers(devbroker)[broker], group, mq)
        finally:
            await client.close()

    return asyncio.run(go())


def test_triggers_restart_and_new_queues(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str, tmp_path: Path
) -> None:
    create(devbroker, topic, 1)
    put(
        devbroker,
        topic,
        [Put(b, 0, f"{b}-first-{i}".encode()) for b in ("broker-a", "broker-b") for i in range(10)],
    )
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "8", "commitGroup": f"{topic}_g"}
    first = run(spark, devbroker, topic, tmp_path / "ckpt", **options)
    assert [len(b) for b in first] == [8, 8, 4]
    # Spark commits a micro-batch's offsets to the source when it plans the next one: the last batch
    # (8 to 10) is committed by the next run
    assert committed(devbroker, topic, f"{topic}_g", "broker-a", 0) == 8
    # while the query is down: more messages, and a second queue on each broker
    create(devbroker, topic, 2)
    later = [
        Put(b, q, f"{b}-later-{q}-{i}".encode())
        for b in ("broker-a", "broker-b")
        for q in (0, 1)
        for i in range(3)
    ]
    put(devbroker, topic, later)
    second = run(spark, devbroker, topic, tmp_path / "ckpt", **options)
    assert all(len(b) <= 8 for b in second)
    got = sorted(body for batch in first + second for (_, _, _, body) in batch)
    want = sorted(
        [f"{b}-first-{i}".encode() for b in ("broker-a", "broker-b") for i in range(10)]
        + [p.body for p in later]
    )
    assert got == want  # each exactly once across the restart
    new_queue = sorted(off for batch in second for (b, q, off, _) in batch if (b, q) == ("broker-b", 1))
    assert new_queue == [0, 1, 2]
    assert committed(devbroker, topic, f"{topic}_g", "broker-a", 0) == 13


def test_starting_at_latest_reads_only_what_comes_after(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str, tmp_path: Path
) -> None:
    create(devbroker, topic, 1)
    put(devbroker, topic, [Put("broker-a", 0, b"old")])
    assert run(spark, devbroker, topic, tmp_path / "ckpt") == []  # default: latest
    put(devbroker, topic, [Put("broker-a", 0, b"new")])
    assert run(spark, devbroker, topic, tmp_path / "ckpt") == [[("broker-a", 0, 1, b"new")]]
