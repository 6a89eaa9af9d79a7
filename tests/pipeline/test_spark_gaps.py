"""Three gaps of the PySpark data source, each test failing on the code it was written against for the
reason in its docstring: a broker without a master when a stream starts, a map with binary keys refused
row by row on the executors, and how date and timestamp map keys are written."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rocksidecar.pipeline import source
from rocksidecar.pipeline.broker_read import Cluster
from rocksidecar.pipeline.message import row_json
from rocksidecar.pipeline.options import OptionError, check_schema, parse
from rocksidecar.pipeline.queue_ranges import QueueRef, from_offsets
from rocksidecar.pipeline.read_options import ReadOptions
from rocksidecar.pipeline.read_options import parse as read_parse
from rocksidecar.rmq import MessageQueue
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData
from tests.pipeline.fake_sidecar import FakeSidecar

pytestmark = pytest.mark.timeout(120)

A0, B0 = QueueRef("T", "broker-a", 0), QueueRef("T", "broker-b", 0)
A_ADDR, B_ADDR, B_SLAVE = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10922"
HIGH = {A_ADDR: 10, B_ADDR: 50}  # each master's queue holds offsets 0 to HIGH - 1


class FailoverCluster:
    """The name server and brokers behind a real broker_read.Cluster: broker-b's route lists only its
    slave (brokerId 1) until ``b_has_master``; each master answers its queue's bounds."""

    def __init__(self) -> None:
        self.b_has_master = False

    def __call__(self, opts: ReadOptions) -> Cluster:  # stands for source.Cluster
        cluster = Cluster(opts)
        cluster._namesrv = self  # type: ignore[assignment]
        cluster._api = self  # type: ignore[assignment]
        return cluster

    async def get_route(self, topic: str) -> TopicRouteData:
        b_addrs = {0: B_ADDR} if self.b_has_master else {1: B_SLAVE}
        return TopicRouteData(
            (QueueData("broker-a", 1, 1, 6), QueueData("broker-b", 1, 1, 6)),
            (BrokerData("c", "broker-a", {0: A_ADDR}), BrokerData("c", "broker-b", b_addrs)),
        )

    async def get_min_offset(self, addr: str, mq: MessageQueue, **_: Any) -> int:
        assert addr in HIGH, f"asked {addr}, not a master"
        return 0

    async def get_max_offset(self, addr: str, mq: MessageQueue, **_: Any) -> int:
        return HIGH[addr]


@pytest.mark.parametrize(
    ("starting", "b0_from"),
    [("latest", 50), ('{"T": {"broker-a:0": 3, "broker-b:0": 30}}', 30)],
)
def test_a_queue_whose_broker_has_no_master_when_a_stream_starts_starts_where_startingoffsets_says(
    monkeypatch: pytest.MonkeyPatch, starting: str, b0_from: int
) -> None:
    """Cluster.queues left a broker without a master (a failover under way) out of the queues, so
    initialOffset did not know broker-b:0 at all: with 'latest', latestOffset took it for a new queue once
    its master was back and entered it at its EARLIEST offset (the stream read offsets 0 to 49, history
    the user did not ask for); with JSON naming it, the stream refused to start ('names queue ... which
    the name server does not list'). A broker that does not answer when the stream starts is held
    UNRESOLVED and enters where startingOffsets puts it: one without a master must too."""
    cluster = FailoverCluster()
    monkeypatch.setattr(source, "Cluster", cluster)
    reader = source.StreamReader(
        read_parse({"namesrv": "h:1", "topic": "T", "startingOffsets": starting}, streaming=True)
    )
    offsets = reader.initialOffset()
    cluster.b_has_master = True  # the failover is over
    read_b0: list[int] = []
    for _ in range(3):  # three micro-batches
        end = reader.latestOffset(offsets, ReadAllAvailable())
        for p in reader.partitions(offsets, end):
            r = p.range  # type: ignore[attr-defined]
            if r.queue == B0:
                read_b0.extend(range(r.start, r.end))
        offsets = end
    assert from_offsets(offsets) == {A0: 10, B0: 50}
    assert min(read_b0, default=b0_from) >= b0_from, f"read offsets {min(read_b0)}.. of broker-b:0"


def test_a_batch_read_refuses_a_broker_without_a_master_as_it_refuses_one_that_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch query reads a fixed set of offsets, so BatchReader refuses to plan while a broker does not
    answer (its queues left out would be a silent subset). A broker without a master was left out of the
    queues before the bounds were asked, so the batch returned broker-a's rows alone and no word of
    broker-b."""
    cluster = FailoverCluster()
    monkeypatch.setattr(source, "Cluster", cluster)
    with pytest.raises(RuntimeError, match=r"broker-b.*no master"):
        source.BatchReader(read_parse({"namesrv": "h:1", "topic": "T"}, streaming=False))
    cluster.b_has_master = True
    reader = source.BatchReader(read_parse({"namesrv": "h:1", "topic": "T"}, streaming=False))
    assert [(r.queue, r.start, r.end) for r in reader.ranges] == [(A0, 0, 10), (B0, 0, 50)]


def test_the_cluster_names_a_broker_without_a_master_as_down() -> None:
    """Cluster.queues lists a masterless broker's queues (so a stream knows them) and Cluster.bounds
    names that broker in DownBrokers without calling anyone, as for a broker that does not answer."""
    from rocksidecar.pipeline.broker_read import DownBrokers

    async def go() -> tuple[set[QueueRef], set[QueueRef], dict[str, str]]:
        cluster = FailoverCluster()(ReadOptions("h:1", ("T",)))
        try:
            queues = await cluster.queues()
            down = DownBrokers()
            bounds = await cluster.bounds(queues, down)
            return set(queues), set(bounds), down.errors
        finally:
            await cluster.close()

    queues, bounds, errors = asyncio.run(go())
    assert queues == {A0, B0} and bounds == {A0}
    assert list(errors) == ["broker-b"] and "no master" in errors["broker-b"]


# --- a map whose keys have no JSON text -----------------------------------------------------------------


@pytest.mark.parametrize(
    "column_type",
    [
        "map<binary,int>",
        "map<binary,map<string,int>>",
        "array<map<binary,string>>",
        "struct<n:int,m:map<binary,int>>",
        "map<string,map<binary,int>>",
        "map<struct<b:binary>,int>",
        "map<array<int>,int>",
    ],
)
def test_a_whole_row_body_refuses_a_map_whose_keys_have_no_json_text_on_the_driver(column_type: str) -> None:
    """A map whose keys are binary (or structs, or arrays) passed check_schema; then every row that held
    such a map was refused on the executors ('column 'm' is a map whose keys (bytes) have no JSON text'),
    one by one, and the write failed only at its commit with every row counted rejected. The schema says
    so before any task runs: refused once on the driver, naming the column, as an interval column is."""
    with pytest.raises(OptionError, match=r"option bodyColumn is not given, .* column 'm' \(") as info:
        check_schema(parse({"topic": "T"}), {"id": "bigint", "m": column_type})
    assert "map keys" in str(info.value)
    # with a body column the row is not written as JSON: the map may be there
    given = check_schema(parse({"topic": "T", "bodyColumn": "b"}), {"b": "string", "m": column_type})
    assert given.column("bodyColumn") == "b"


@pytest.mark.parametrize(
    "column_type",
    [
        "map<string,binary>",
        "map<date,int>",
        "map<timestamp,array<binary>>",
        "map<decimal(10,2),int>",
        "struct<map:binary,binary:map<int,string>>",
        "array<binary>",
    ],
)
def test_a_whole_row_body_takes_maps_whose_keys_have_json_text(column_type: str) -> None:
    """Binary values are written (base64); only keys have no text. A field named 'map' is no map."""
    assert check_schema(parse({"topic": "T"}), {"m": column_type}).column("bodyColumn") is None


def test_a_write_of_a_binary_keyed_map_fails_once_on_the_driver(
    spark: SparkSession, fake: FakeSidecar, fake_url: str
) -> None:
    """Through Spark: save() failed only after every task had refused each of its rows (the error was
    '3 of 3 rows were rejected'); now it fails at once with the driver's error naming the column, and
    no task talks to the sidecar."""
    df = spark.range(3).select("id", F.create_map(F.lit(b"ab"), F.col("id")).alias("m"))
    assert df.schema["m"].dataType.simpleString() == "map<binary,bigint>"
    w = df.write.format("rocksidecar").mode("append").option("topic", "T").option("endpoint", fake_url)
    with pytest.raises(Exception, match=r"column 'm' \(map<binary,bigint>\).*map keys") as info:
        w.save()
    assert "rejected" not in str(info.value)
    assert fake.requests == []


# --- date and timestamp map keys ------------------------------------------------------------------------


def test_date_and_timestamp_map_keys_are_written_as_iso_text_like_the_values() -> None:
    """Kept on purpose (a guard, not a defect): Spark's to_json writes such a key as its internal value
    (checked on PySpark 4.3: a date key as "19724", days since the epoch, a timestamp key as
    "1704164645123456", microseconds), which no reader of the body expects; the README promises
    to_json's form only for NaN and Infinity. A key is written as the same value is, ISO text."""
    day, moment = datetime.date(2024, 1, 2), datetime.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert row_json({"m": {day: 1, moment: 2}, "d": day, "t": moment}) == (
        '{"m":{"2024-01-02":1,"2024-01-02T03:04:05.123456":2},'
        '"d":"2024-01-02","t":"2024-01-02T03:04:05.123456"}'
    )
