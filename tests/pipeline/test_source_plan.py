"""The read source's driver planning and a partition's reading against a stand-in for broker_read.Cluster,
without Spark's JVM: a queue reset between micro-batches (failOnDataLoss both ways), offsets JSON naming a
queue the topic lacks or an offset past a queue's end, and Arrow batches bounded by their bodies' bytes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from rocksidecar.pipeline import source
from rocksidecar.pipeline.broker_read import Bounds, DataLossError, Page
from rocksidecar.pipeline.options import OptionError
from rocksidecar.pipeline.queue_ranges import QueueRange, QueueRef
from rocksidecar.pipeline.read_options import parse

A0, A1 = QueueRef("T", "broker-a", 0), QueueRef("T", "broker-a", 1)
HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"  # a store host as a record carries it: IPv4 and port


class FakeCluster:
    """Stands for broker_read.Cluster (source makes one with ``Cluster(opts)``): queues with the given
    bounds; a read yields pages of ``page`` records whose bodies ``body_of(offset)`` gives."""

    def __init__(self, bounds: dict[QueueRef, Bounds], body_of: Any = None, page: int = 32) -> None:
        self.bounds_by_ref = bounds
        self.body_of = body_of or (lambda offset: b"m%d" % offset)
        self.page = page

    def __call__(self, opts: Any) -> FakeCluster:
        return self

    async def close(self) -> None:
        return None

    async def queues(self) -> dict[QueueRef, str]:
        return {ref: "127.0.0.1:10911" for ref in self.bounds_by_ref}

    async def bounds(self, queues: Any, down: Any) -> dict[QueueRef, Bounds]:
        return dict(self.bounds_by_ref)

    async def read(self, ref: QueueRef, start: int, end: int) -> AsyncGenerator[Page, None]:
        for at in range(start, end, self.page):
            yield [
                (o, self.body_of(o), "", 1_000, 2_000, 0, HOST, o * 100)
                for o in range(at, min(end, at + self.page))
            ]


def stream(monkeypatch: pytest.MonkeyPatch, cluster: FakeCluster, **options: str) -> source.StreamReader:
    monkeypatch.setattr(source, "Cluster", cluster)
    return source.StreamReader(parse({"namesrv": "h:1", "topic": "T", **options}, streaming=True))


def planned(reader: source.StreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(p.range.queue, p.range.start, p.range.end) for p in reader.partitions(start, end)]  # type: ignore[attr-defined]


def test_a_queue_reset_between_micro_batches_fails_naming_the_queue_and_offsets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checkpoint reads broker-a:0 from 100; the topic was re-created and the queue holds 0 to 5.
    The stream held the queue at 100 and, once the new queue passed 100, read on from there: offsets 0
    to 99 of the new queue were never read, and nothing said so."""
    cluster = FakeCluster({A0: Bounds(0, 5), A1: Bounds(0, 7)})
    reader = stream(monkeypatch, cluster)
    start = {"T": {"broker-a:0": 100, "broker-a:1": 3}}
    with pytest.raises(DataLossError, match=r"queue T@broker-a:0 was reset: .* from offset 100, .* 0 to 5"):
        reader.latestOffset(start, ReadAllAvailable())
    cluster.bounds_by_ref[A0] = Bounds(0, 150)  # the new queue grew past the checkpoint: too late to see
    assert reader.latestOffset(start, ReadAllAvailable()) == {"T": {"broker-a:0": 150, "broker-a:1": 7}}


@pytest.mark.parametrize("limit", [ReadAllAvailable(), ReadMaxRows(3)])
def test_without_fail_on_data_loss_a_reset_queue_is_read_again_from_its_earliest_offset(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, limit: Any
) -> None:
    cluster = FakeCluster({A0: Bounds(2, 5), A1: Bounds(0, 7)})
    reader = stream(monkeypatch, cluster, failOnDataLoss="false")
    start = {"T": {"broker-a:0": 100, "broker-a:1": 3}}
    with caplog.at_level(logging.WARNING, logger=source.__name__):
        end = reader.latestOffset(start, limit)
    assert end["T"]["broker-a:0"] == 2
    assert "queue T@broker-a:0 was reset" in caplog.text and "again from offset 2" in caplog.text
    # this micro-batch reads nothing of the reset queue (its range ends before it starts), also replayed
    assert [q for q, *_ in planned(reader, start, end)] == [A1]
    # the next one reads the new queue from its earliest offset: nothing of it is skipped
    after = reader.latestOffset(end, ReadAllAvailable())
    assert (A0, 2, 5) in planned(reader, end, after)


def test_an_available_now_run_reads_a_reset_queue_from_its_earliest_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster({A0: Bounds(0, 5)})
    reader = stream(monkeypatch, cluster, failOnDataLoss="false")
    reader.prepareForTriggerAvailableNow()
    start = {"T": {"broker-a:0": 100}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"T": {"broker-a:0": 0}}
    last = reader.latestOffset(end, ReadAllAvailable())
    assert planned(reader, end, last) == [(A0, 0, 5)]


def resolve(cluster: FakeCluster, options: dict[str, str], *, ending: bool) -> dict[QueueRef, int]:
    opts = parse({"namesrv": "h:1", "topic": "T", **options}, streaming=False)

    async def go() -> dict[QueueRef, int]:
        queues = await cluster.queues()
        bounds = await cluster.bounds(queues, None)
        position = opts.ending if ending else opts.starting
        return await source._resolve(cluster, position, queues, bounds, ending)  # type: ignore[arg-type]

    return asyncio.run(go())


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_offsets_json_naming_a_queue_the_topic_lacks_is_refused_naming_it(option: str) -> None:
    """A typo in the broker name ('broker-A:0' for 'broker-a:0') was ignored: the queue meant started
    at its earliest offset (a stream re-read its whole history) or ended at its latest."""
    cluster = FakeCluster({A0: Bounds(0, 1000), A1: Bounds(0, 10)})
    doc = '{"T": {"broker-a:1": 5, "broker-A:0": 900}}'
    with pytest.raises(
        OptionError,
        match=rf"option {option} names queue T@broker-A:0, .* queues now: broker-a:0, broker-a:1;",
    ):
        resolve(cluster, {option: doc}, ending=option == "endingOffsets")
    got = resolve(cluster, {option: '{"T": {"broker-a:0": 900}}'}, ending=option == "endingOffsets")
    assert got[A0] == 900


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_an_offset_past_a_queue_s_end_is_refused_naming_the_option(
    monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """endingOffsets past the end failed the task with an error saying retention deleted offsets that
    were never written (startingOffsets past it read nothing, and a stream would take it for a reset)."""
    cluster = FakeCluster({A0: Bounds(0, 5), A1: Bounds(0, 5)})
    monkeypatch.setattr(source, "Cluster", cluster)
    options = {"namesrv": "h:1", "topic": "T", option: '{"T": {"broker-a:0": 9}}'}
    with pytest.raises(
        OptionError, match=rf"option {option}: offset 9 of queue T@broker-a:0 is past its end"
    ):
        source.BatchReader(parse(options, streaming=False))
    at_end = source.BatchReader(parse({**options, option: '{"T": {"broker-a:0": 5}}'}, streaming=False))
    want = (
        [QueueRange(A1, 0, 5)]
        if option == "startingOffsets"
        else [QueueRange(A0, 0, 5), QueueRange(A1, 0, 5)]
    )
    assert at_end.ranges == want


def test_a_partition_s_arrow_batches_are_bounded_by_their_bodies_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4096 rows were gathered before a batch went to Spark whatever the bodies' sizes: with 4 MiB bodies
    (a broker's default maxMessageSize) 16 GiB held by one partition at once. Here the bound is 1000
    bytes; offset 40's body is larger alone, and goes in a batch of its own."""
    monkeypatch.setattr(source, "BYTES_PER_BATCH", 1000)
    sizes = {o: 1500 if o == 40 else 300 for o in range(100)}
    cluster = FakeCluster({A0: Bounds(0, 100)}, body_of=lambda o: bytes([o]) * sizes[o], page=7)
    monkeypatch.setattr(source, "Cluster", cluster)
    opts = parse({"namesrv": "h:1", "topic": "T"}, streaming=False)
    batches: list[pa.RecordBatch] = list(source.read_range(opts, QueueRange(A0, 0, 100)))
    offsets = [b.column("queueOffset").to_pylist() for b in batches]
    assert [o for batch in offsets for o in batch] == list(range(100))  # each once, in order
    assert [40] in offsets
    for batch in batches:
        body = sum(len(b) for b in batch.column("body").to_pylist())
        assert body <= 1000 or batch.num_rows == 1
    assert all(b.num_rows == 3 for b in batches[:13])  # 3 bodies of 300 fit, a fourth would not


def test_a_partition_s_arrow_batches_hold_at_most_rows_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "ROWS_PER_BATCH", 10)
    monkeypatch.setattr(source, "Cluster", FakeCluster({A0: Bounds(5, 40)}, page=4))
    opts = parse({"namesrv": "h:1", "topic": "T"}, streaming=False)
    batches = list(source.read_range(opts, QueueRange(A0, 5, 40)))
    assert [b.num_rows for b in batches] == [10, 10, 10, 5]
    assert [o for b in batches for o in b.column("queueOffset").to_pylist()] == list(range(5, 40))
