"""spark.read.format("rocksidecar") against devbroker: the documented row schema, start and end offsets
(earliest, latest, per-queue JSON, a timestamp), minPartitions, tag and SQL92 filters, bad options."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import httpx
import pytest
from pyspark.sql import DataFrame, SparkSession

from bench.common import DevbrokerProcess
from rocksidecar.pipeline.options import OptionError
from rocksidecar.pipeline.source import FIRST_MS, LAST_MS
from tests.pipeline.source_topics import Put, create, put

pytestmark = pytest.mark.timeout(300)


def read(spark: SparkSession, devbroker: DevbrokerProcess, topic: str, **options: str) -> DataFrame:
    r = spark.read.format("rocksidecar").option("namesrv", devbroker.namesrv).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def fill(devbroker: DevbrokerProcess, topic: str, per_queue: int) -> list[str]:
    """``per_queue`` messages in each of 2 queues of each broker, body "<broker>/<queue>/<i>"."""
    create(devbroker, topic, 2)
    puts = [
        Put(b, q, f"{b}/{q}/{i}".encode(), tags="even" if i % 2 == 0 else "odd", keys=(f"k{i}", "x"))
        for b in ("broker-a", "broker-b")
        for q in (0, 1)
        for i in range(per_queue)
    ]
    return put(devbroker, topic, puts)


def test_rows_have_the_documented_schema_and_every_message_once(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str
) -> None:
    create(devbroker, topic, 2)
    body = bytes(range(256))  # binary, every byte value
    [uniq] = put(
        devbroker, topic, [Put("broker-b", 1, body, tags="T", keys=("a", "b"), properties=(("p", "v"),))]
    )
    df = read(spark, devbroker, topic)
    assert [f.name for f in df.schema.fields] == [
        "topic", "broker", "queueId", "queueOffset", "msgId", "uniqKey", "body", "tags", "keys",
        "properties", "bornTimestamp", "storeTimestamp", "reconsumeTimes",
    ]  # fmt: skip
    [row] = df.collect()
    assert (row.topic, row.broker, row.queueId, row.queueOffset) == (topic, "broker-b", 1, 0)
    assert (row.msgId, row.uniqKey, bytes(row.body), row.tags) == (uniq, uniq, body, "T")
    assert (row.keys, row.properties, row.reconsumeTimes) == (["a", "b"], {"p": "v"}, 0)
    assert row.bornTimestamp <= row.storeTimestamp


def test_a_born_timestamp_outside_spark_s_years_reads_as_null(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message's bornTimestamp is its producer's own 64-bit number. 2**62 failed the task (Arrow's cast
    to microseconds overflowed) and every retry of it; the year 10000 failed collect(). Null now, the
    rest of the row and the other rows as they were; 1969 and the range's edges are times."""
    create(devbroker, topic, 1)
    borns = [2**62, 253_402_300_800_000, -1, LAST_MS, FIRST_MS, FIRST_MS - 1, LAST_MS + 1]
    for born in borns:  # the producer's clock, as BrokerApi.send writes bornTimestamp
        monkeypatch.setattr("rocksidecar.rmq.broker.time_ns", lambda born=born: born * 1_000_000)
        put(devbroker, topic, [Put("broker-a", 0, str(born).encode())])
    monkeypatch.undo()
    rows = sorted(read(spark, devbroker, topic).collect(), key=lambda r: r.queueOffset)
    assert [bytes(r.body).decode() for r in rows] == [str(b) for b in borns]
    epoch = datetime(1970, 1, 1)  # collect() gives naive local times; the session's zone is UTC
    got = [
        None if r.bornTimestamp is None else (r.bornTimestamp - epoch) // timedelta(milliseconds=1)
        for r in rows
    ]
    assert got == [None, None, -1, LAST_MS, FIRST_MS, None, None]
    assert all(r.storeTimestamp is not None for r in rows)


def test_starting_and_ending_offsets_select_the_range(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str
) -> None:
    fill(devbroker, topic, 10)
    everything = read(spark, devbroker, topic)
    assert everything.count() == 40
    assert everything.rdd.getNumPartitions() == 4  # one a queue
    start = {topic: {"broker-a:0": 3, "broker-b:1": -1}}  # unnamed queues start at the earliest
    end = {topic: {"broker-a:0": 5, "broker-a:1": 2, "broker-b:0": -1}}  # unnamed ones end at the latest
    rows = read(
        spark, devbroker, topic, startingOffsets=json.dumps(start), endingOffsets=json.dumps(end)
    ).collect()
    got = sorted((r.broker, r.queueId, r.queueOffset, bytes(r.body).decode()) for r in rows)
    want = (
        [("broker-a", 0, i, f"broker-a/0/{i}") for i in (3, 4)]
        + [("broker-a", 1, i, f"broker-a/1/{i}") for i in (0, 1)]
        + [("broker-b", 0, i, f"broker-b/0/{i}") for i in range(10)]
    )
    assert got == want


def test_a_timestamp_starts_where_the_store_time_is(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str
) -> None:
    fill(devbroker, topic, 3)
    # devbroker runs on this machine's clock: a minute from now is after every store time
    after = time.time_ns() // 1_000_000 + 60_000
    assert read(spark, devbroker, topic, startingOffsets=str(after)).count() == 4 * 1  # last of each queue
    assert read(spark, devbroker, topic, startingOffsets="0").count() == 12


def test_min_partitions_splits_queues_without_losing_or_repeating(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str
) -> None:
    fill(devbroker, topic, 25)
    df = read(spark, devbroker, topic, minPartitions="10")
    assert df.rdd.getNumPartitions() >= 10
    rows = df.collect()
    assert sorted((r.broker, r.queueId, r.queueOffset) for r in rows) == sorted(
        (b, q, i) for b in ("broker-a", "broker-b") for q in (0, 1) for i in range(25)
    )


def test_a_tag_filter_and_an_sql92_filter(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str
) -> None:
    create(devbroker, topic, 1)
    put(
        devbroker,
        topic,
        [
            Put("broker-a", 0, f"m{i}".encode(), tags=f"t{i % 3}", properties=(("n", str(i)),))
            for i in range(30)
        ],
    )
    tagged = read(spark, devbroker, topic, tags="t1 || t2").collect()
    assert sorted(bytes(r.body).decode() for r in tagged) == sorted(f"m{i}" for i in range(30) if i % 3)
    by_sql = read(spark, devbroker, topic, sql="n >= 25").collect()
    assert sorted(bytes(r.body).decode() for r in by_sql) == [f"m{i}" for i in range(25, 30)]


def test_a_bad_option_fails_the_query_on_the_driver_naming_it(
    spark: SparkSession, devbroker: DevbrokerProcess
) -> None:
    """One case through Spark (test_queue_ranges checks every rule of the parser without it)."""
    with pytest.raises(Exception, match="did you mean 'failOnDataLoss'") as info:
        read(spark, devbroker, "T", failOnDataLos="false").collect()
    assert OptionError.__name__ in str(info.value)


def expire(devbroker: DevbrokerProcess, broker: str, topic: str, queue_id: int, before: int) -> None:
    url = f"{devbroker.admin_url}/brokers/{broker}/topics/{topic}/queues/{queue_id}/expire"
    httpx.post(url, params={"before": before}, timeout=10).raise_for_status()


def test_offsets_deleted_by_retention_fail_naming_the_queue_or_are_skipped(
    spark: SparkSession, devbroker: DevbrokerProcess, topic: str
) -> None:
    create(devbroker, topic, 1)
    put(devbroker, topic, [Put("broker-a", 0, f"m{i}".encode()) for i in range(5)])
    expire(devbroker, "broker-a", topic, 0, 3)
    start = json.dumps({topic: {"broker-a:0": 0}})
    with pytest.raises(Exception, match=rf"queue {topic}@broker-a:0: offsets 0 to 2 are gone") as info:
        read(spark, devbroker, topic, startingOffsets=start).collect()
    assert "failOnDataLoss=false" in str(info.value)
    rows = read(spark, devbroker, topic, startingOffsets=start, failOnDataLoss="false").collect()
    assert sorted(bytes(r.body) for r in rows) == [b"m3", b"m4"]
