"""``spark.read.format("rocksidecar")`` and ``readStream.format("rocksidecar")``: one input partition per
queue (or per piece of one, for minPartitions), offsets planned on the driver, messages pulled by the
executors. A stream's offsets ({topic: {"broker:queueId": next offset}}) live in Spark's checkpoint.

Each call that talks to RocketMQ runs in ``asyncio.run`` (driver) or a private event loop per partition
(executors): Spark calls a data source from plain threads of worker processes that it reuses and may
kill, so no loop is running there, and a loop per call leaves no connection or task behind it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .broker_read import Bounds, Cluster, DownBrokers, Page, columns
from .queue_ranges import Offsets, QueueRange, QueueRef, cap, from_offsets, hold_at, split, to_offsets
from .read_options import ReadOptions, Start

log = logging.getLogger(__name__)

SCHEMA = (
    "topic STRING, broker STRING, queueId INT, queueOffset BIGINT, msgId STRING, uniqKey STRING, "
    "body BINARY, tags STRING, keys ARRAY<STRING>, properties MAP<STRING,STRING>, "
    "bornTimestamp TIMESTAMP, storeTimestamp TIMESTAMP, reconsumeTimes INT"
)
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("broker", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("msgId", pa.string()),
        ("uniqKey", pa.string()),
        ("body", pa.binary()),
        ("tags", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("bornTimestamp", pa.timestamp("us", tz="UTC")),
        ("storeTimestamp", pa.timestamp("us", tz="UTC")),
        ("reconsumeTimes", pa.int32()),
    ]
)
ROWS_PER_BATCH = 4096  # rows per Arrow record batch handed to Spark
_MICROS = pa.timestamp("us", tz="UTC")  # Spark's TIMESTAMP
_MILLIS = pa.timestamp("ms", tz="UTC")  # RocketMQ's
# Spark's TIMESTAMP range (years 0001 to 9999) less a day at each end, two at the start, so that a row
# converts to Python's datetime in any time zone (PySpark's collect() makes local times, and CPython's
# local conversion looks a day back), in epoch milliseconds. A message's bornTimestamp is its producer's
# own 64-bit number: one outside is null. Beyond ~year 292 000 Arrow's cast to microseconds failed the
# task (and every retry of it: the stream could not pass that offset); beyond 9999 collect() failed.
FIRST_MS = -62_135_596_800_000 + 2 * 86_400_000  # 0001-01-03T00:00:00Z
LAST_MS = 253_402_300_799_999 - 86_400_000  # 9999-12-30T23:59:59.999Z


@dataclass(frozen=True)
class QueuePartition(InputPartition):
    range: QueueRange


async def _with_cluster(opts: ReadOptions, work: Any) -> Any:
    cluster = Cluster(opts)
    try:
        return await work(cluster)
    finally:
        await cluster.close()


async def _resolve(
    cluster: Cluster,
    position: Start,
    queues: dict[QueueRef, str],
    bounds: dict[QueueRef, Bounds],
    latest: bool,
) -> dict[QueueRef, int]:
    """Where ``position`` is in each queue with known bounds: earliest/latest, the offset nearest a
    timestamp, or the JSON's offset (-2 earliest, -1 latest); a queue the JSON leaves out starts at the
    earliest (reading) or ends at the latest (ending)."""
    out: dict[QueueRef, int] = {}
    named = from_offsets(position) if isinstance(position, dict) else {}
    for ref, b in bounds.items():
        if isinstance(position, int) and not isinstance(position, bool):
            out[ref] = max(b.low, min(b.high, await cluster.offset_at(ref, queues[ref], position)))
            continue
        n = named.get(ref, -1 if latest else -2) if isinstance(position, dict) else position
        out[ref] = b.low if n in ("earliest", -2) else b.high if n in ("latest", -1) else int(n)
    return out


async def _stream_bounds(cluster: Cluster) -> tuple[dict[QueueRef, str], dict[QueueRef, Bounds]]:
    """The queues and the bounds of those whose broker answered; a stream goes on without the others
    (warned: their queues stall until the broker is back)."""
    queues = await cluster.queues()
    down = DownBrokers()
    bounds = await cluster.bounds(queues, down)
    _warn_down(down, queues)
    return queues, bounds


def _warn_down(down: DownBrokers, queues: dict[QueueRef, str]) -> None:
    for broker, error in sorted(down.errors.items()):
        stalled = [str(r) for r in sorted(queues) if r.broker == broker]
        log.warning(
            "broker %r did not answer its offsets (%s): its queues %s stall until it is back; others go on",
            broker,
            error,
            ", ".join(stalled[:20]),
        )


def read_range(opts: ReadOptions, qr: QueueRange) -> Iterator[pa.RecordBatch]:
    """The messages of one range as Arrow record batches, pulled in an event loop of this call's own;
    the loop runs until a batch's worth of rows is in (not once a pull: each entry costs)."""
    loop = asyncio.new_event_loop()
    cluster = Cluster(opts)
    pages = cluster.read(qr.queue, qr.start, qr.end)

    async def next_rows() -> Page:
        rows: Page = []
        async for page in pages:
            rows.extend(page)
            if len(rows) >= ROWS_PER_BATCH:
                break
        return rows

    try:
        while rows := loop.run_until_complete(next_rows()):
            yield _arrow(qr.queue, rows)
    finally:
        loop.run_until_complete(pages.aclose())
        loop.run_until_complete(cluster.close())
        loop.close()


def _arrow(ref: QueueRef, records: Page) -> pa.RecordBatch:
    """One Arrow array a column, from plain lists (broker_read.columns); the queue's own columns
    repeated, timestamps as integer milliseconds cast by Arrow (no datetime objects)."""
    n = len(records)
    c = columns(records)
    arrays = [
        pa.repeat(pa.scalar(ref.topic, pa.string()), n),
        pa.repeat(pa.scalar(ref.broker, pa.string()), n),
        pa.repeat(pa.scalar(ref.queue_id, pa.int32()), n),
        pa.array(c.offsets, pa.int64()),
        pa.array(c.msg_ids, pa.string()),
        pa.array(c.uniq_keys, pa.string()),
        pa.array(c.bodies, pa.binary()),
        pa.array(c.tags, pa.string()),
        pa.array(c.keys, pa.list_(pa.string())),
        pa.array(c.properties, pa.map_(pa.string(), pa.string())),
        _timestamps(c.born_ms),
        _timestamps(c.stored_ms),
        pa.array(c.reconsume_times, pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _timestamps(ms: list[int]) -> pa.Array:
    """Milliseconds as Spark's TIMESTAMP; null outside its years (FIRST_MS, LAST_MS). Built as int64 and
    cast: half the time of building the timestamp array from the list, the range check included."""
    arr = pa.array(ms, pa.int64())
    if len(arr):
        span = pc.min_max(arr)
        if span["min"].as_py() < FIRST_MS or span["max"].as_py() > LAST_MS:
            inside = pc.and_(pc.greater_equal(arr, FIRST_MS), pc.less_equal(arr, LAST_MS))
            arr = pc.if_else(inside, arr, pa.scalar(None, pa.int64()))
    return arr.cast(_MILLIS).cast(_MICROS)


class BatchReader(DataSourceReader):
    """Plans the ranges on the driver when created: startingOffsets to endingOffsets of every queue."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.ranges = asyncio.run(_with_cluster(opts, self._plan))

    async def _plan(self, cluster: Cluster) -> list[QueueRange]:
        queues = await cluster.queues()
        down = DownBrokers()
        bounds = await cluster.bounds(queues, down)
        if down.errors:
            # a batch query reads a fixed set of offsets: leaving a broker out would return a silent subset
            raise RuntimeError(
                "brokers did not answer their queues' offsets: "
                + "; ".join(f"{b}: {e}" for b, e in sorted(down.errors.items()))
            )
        start = await _resolve(cluster, self.opts.starting, queues, bounds, latest=False)
        end = await _resolve(cluster, self.opts.ending, queues, bounds, latest=True)
        ranges = [QueueRange(ref, start[ref], max(start[ref], end[ref])) for ref in sorted(bounds)]
        return split(ranges, self.opts.min_partitions)

    def partitions(self) -> Sequence[InputPartition]:
        return [QueuePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        return read_range(self.opts, partition.range)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are each queue's next offset to read. A queue seen for the first time enters at its
    earliest offset with nothing to read in that micro-batch (so a replayed batch plans alike); a queue
    whose broker does not answer keeps its offset (it stalls, the others go on).

    ``trigger(availableNow=True)``: what the queues hold when the query starts is read (in micro-batches
    of maxOffsetsPerTrigger), then the query ends; queues that appear later wait for the next run."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[QueueRef, int] | None = None  # availableNow: where the run ends

    def prepareForTriggerAvailableNow(self) -> None:
        async def work(cluster: Cluster) -> dict[QueueRef, int]:
            _, bounds = await _stream_bounds(cluster)
            return {ref: b.high for ref, b in bounds.items()}

        self._target = asyncio.run(_with_cluster(self.opts, work))

    def initialOffset(self) -> Offsets:
        async def work(cluster: Cluster) -> Offsets:
            queues, bounds = await _stream_bounds(cluster)
            return to_offsets(await _resolve(cluster, self.opts.starting, queues, bounds, latest=False))

        result: Offsets = asyncio.run(_with_cluster(self.opts, work))
        return result

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = from_offsets(start)

        async def work(cluster: Cluster) -> Offsets:
            _, bounds = await _stream_bounds(cluster)
            latest = dict(begin)  # a queue that was not answered for stays where it is
            for ref, b in bounds.items():
                latest[ref] = max(b.high, begin[ref]) if ref in begin else b.low
            if self._target is not None:
                latest = hold_at(begin, latest, self._target)
            if isinstance(limit, ReadMaxRows):
                latest = cap({r: begin.get(r, latest[r]) for r in latest}, latest, limit.max_rows)
            return to_offsets(latest)

        result: Offsets = asyncio.run(_with_cluster(self.opts, work))
        return result

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin, until = from_offsets(start), from_offsets(end)
        ranges = [QueueRange(ref, begin.get(ref, n), n) for ref, n in sorted(until.items())]
        return [QueuePartition(r) for r in split(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        return read_range(self.opts, partition.range)

    def commit(self, end: Offsets) -> None:
        group = self.opts.commit_group
        if group is None:
            return
        positions = from_offsets(end)

        async def work(cluster: Cluster) -> None:
            await cluster.queues()
            await cluster.commit(positions, group)

        asyncio.run(_with_cluster(self.opts, work))
