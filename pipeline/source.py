"""``spark.read.format("rocksidecar")`` and ``readStream.format("rocksidecar")``: one input partition per
queue (or per piece of one, for minPartitions), offsets planned on the driver, messages pulled by the
executors. A stream's offsets ({topic: {"broker:queueId": next offset}}, or UNRESOLVED for a queue whose
broker did not answer when the stream started) live in Spark's checkpoint.

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

from .broker_read import CALL_FAILED, NO_MASTER, Bounds, Cluster, DataLossError, DownBrokers, Page, columns
from .options import OptionError
from .queue_ranges import (
    UNRESOLVED,
    Offsets,
    QueueRange,
    QueueRef,
    cap,
    from_offsets,
    hold_at,
    split,
    to_offsets,
)
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
# and the bodies' bytes per batch: 4096 bodies of 4 MiB (a broker's default maxMessageSize) would be 16 GiB
# held by one partition at once; Arrow copies them once more while it builds the batch
BYTES_PER_BATCH = 64 << 20
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
    earliest (reading) or ends at the latest (ending). ``latest`` says which: endingOffsets, else
    startingOffsets. Raises OptionError for JSON naming a queue the topics do not have, or an offset past
    a queue's end."""
    option = "endingOffsets" if latest else "startingOffsets"
    out: dict[QueueRef, int] = {}
    named = from_offsets(position) if isinstance(position, dict) else {}
    unknown = sorted(set(named) - set(queues))
    if unknown:
        # as Kafka's source refuses partitions not assigned: a typo ('broker-A:0') would otherwise leave
        # the queue it meant at the default, which for a stream re-reads that queue's whole history
        first = unknown[0]
        theirs = ", ".join(r.key for r in sorted(queues) if r.topic == first.topic)[:500] or "none"
        raise OptionError(
            f"option {option} names queue {first}, which the name server does not list for topic "
            f"{first.topic!r} (its queues now: {theirs}; a broker is named as the route spells it, "
            "case included)"
        )
    for ref, b in bounds.items():
        if isinstance(position, int) and not isinstance(position, bool):
            out[ref] = max(b.low, min(b.high, await cluster.offset_at(ref, queues[ref], position)))
            continue
        n = named.get(ref, -1 if latest else -2) if isinstance(position, dict) else position
        if isinstance(n, int) and n > b.high:
            # Kafka's source fails here too (its reader reports the out-of-range offset as data loss,
            # "Cannot fetch offset"); refused on the driver instead, so the error says what is wrong: an
            # offset never written (a stream would take it for a reset queue, a batch for lost data)
            raise OptionError(
                f"option {option}: offset {n} of queue {ref} is past its end (it holds {b.low} to {b.high})"
            )
        out[ref] = b.low if n in ("earliest", -2) else b.high if n in ("latest", -1) else int(n)
    return out


async def _stream_bounds(cluster: Cluster) -> tuple[dict[QueueRef, str], dict[QueueRef, Bounds]]:
    """The queues and the bounds of those whose broker answered (one without a master does not); a
    stream goes on without the others (warned: their queues stall until the broker is back)."""
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
    the loop runs until a batch's worth of rows is in (not once a pull: each entry costs). A batch holds
    at most ROWS_PER_BATCH rows and BYTES_PER_BATCH of bodies (one larger body goes alone), so what a
    partition holds is bounded by bytes too, whatever the bodies' sizes."""
    loop = asyncio.new_event_loop()
    cluster = Cluster(opts)
    pages = cluster.read(qr.queue, qr.start, qr.end)
    held: Page = []  # pulled, not yet handed to Spark: the rest of a page that ended past a batch's end

    async def fill() -> None:
        size = sum(len(r[1]) for r in held)
        while len(held) < ROWS_PER_BATCH and size <= BYTES_PER_BATCH:
            page = await anext(pages, None)
            if page is None:
                return
            held.extend(page)
            size += sum(len(r[1]) for r in page)

    try:
        while True:
            loop.run_until_complete(fill())
            if not held:
                break
            n = _batch_end(held)
            yield _arrow(qr.queue, held[:n])
            del held[:n]
    finally:
        loop.run_until_complete(pages.aclose())
        loop.run_until_complete(cluster.close())
        loop.close()


def _batch_end(rows: Page) -> int:
    """How many of ``rows`` the next batch takes: at most ROWS_PER_BATCH, and no more bodies than
    BYTES_PER_BATCH, but at least one row however large its body."""
    size = 0
    for i, row in enumerate(rows[:ROWS_PER_BATCH]):
        size += len(row[1])
        if size > BYTES_PER_BATCH:
            return max(1, i)
    return min(len(rows), ROWS_PER_BATCH)


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
        if self.opts.sql:  # checked before any task pulls: one that does not parse would be served unfiltered
            await cluster.check_filter()
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
        for ref in sorted(bounds):
            if start[ref] > end[ref]:
                # as Spark's Kafka source fails ("Beginning offset ... is after the ending offset"):
                # an empty range here would be an empty DataFrame and no word of why
                raise OptionError(
                    f"queue {ref}: startingOffsets gives offset {start[ref]}, after offset {end[ref]} that "
                    "endingOffsets gives: nothing would be read"
                )
        ranges = [QueueRange(ref, start[ref], end[ref]) for ref in sorted(bounds)]
        return split(ranges, self.opts.min_partitions)

    def partitions(self) -> Sequence[InputPartition]:
        return [QueuePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        return read_range(self.opts, partition.range)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are each queue's next offset to read. A queue seen for the first time enters at its
    earliest offset with nothing to read in that micro-batch (so a replayed batch plans alike); a queue
    whose broker does not answer (or has no master) keeps its offset (it stalls, the others go on). One
    whose broker did not answer (or had no master: a failover under way) when the stream started is
    UNRESOLVED until it does, then enters where startingOffsets puts it
    (resolved then, so ``latest`` is that queue's end then: what a broker that was only slow to answer
    stored in between is not read), again with nothing to read in that micro-batch.

    ``trigger(availableNow=True)``: what the queues hold when the query starts is read (in micro-batches
    of maxOffsetsPerTrigger), then the query ends; queues that appear later wait for the next run."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._target: dict[QueueRef, int] | None = None  # availableNow: where the run ends
        if opts.sql:  # on the driver, when the query starts (a new one or one restarted from a checkpoint)
            asyncio.run(_with_cluster(opts, Cluster.check_filter))

    def prepareForTriggerAvailableNow(self) -> None:
        async def work(cluster: Cluster) -> dict[QueueRef, int]:
            _, bounds = await _stream_bounds(cluster)
            return {ref: b.high for ref, b in bounds.items()}

        self._target = asyncio.run(_with_cluster(self.opts, work))

    def initialOffset(self) -> Offsets:
        async def work(cluster: Cluster) -> Offsets:
            queues, bounds = await _stream_bounds(cluster)
            start = await _resolve(cluster, self.opts.starting, queues, bounds, latest=False)
            # a queue whose broker is down or has no master: later taken for a new queue, it would enter
            # at its earliest offset (re-reading its history against startingOffsets); latestOffset
            # resolves it instead
            start.update({ref: UNRESOLVED for ref in queues if ref not in bounds})
            return to_offsets(start)

        result: Offsets = asyncio.run(_with_cluster(self.opts, work))
        return result

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = from_offsets(start)

        async def work(cluster: Cluster) -> Offsets:
            queues, bounds = await _stream_bounds(cluster)
            latest = dict(begin)  # a queue that was not answered for stays where it is
            restart: dict[QueueRef, int] = {}  # reset queues: read again from their earliest offset
            entering: dict[QueueRef, Bounds] = {}  # UNRESOLVED queues whose broker answers now
            for ref, b in bounds.items():
                if ref not in begin:
                    latest[ref] = b.low
                elif begin[ref] == UNRESOLVED:
                    entering[ref] = b
                elif b.high < begin[ref]:
                    restart[ref] = self._reset(ref, begin[ref], b)
                else:
                    latest[ref] = b.high
            if self._target is not None:
                latest = hold_at(begin, latest, self._target)
            if isinstance(limit, ReadMaxRows):
                latest = cap({r: begin.get(r, latest[r]) for r in latest}, latest, limit.max_rows)
            # after hold_at and cap, which never move a queue back: this micro-batch's range of a reset
            # queue ends before it starts, so it reads nothing there (partitions() drops it, the same on
            # a replay), and the next one reads the new queue from its earliest offset on
            latest.update(restart)
            if entering:  # likewise: this micro-batch's range starts UNRESOLVED, partitions() drops it
                # the queues the stream knows count as the topics' (the JSON was checked against them at
                # the start), also one the route no longer lists
                known = {**dict.fromkeys(begin, NO_MASTER), **queues}
                latest.update(await _resolve(cluster, self.opts.starting, known, entering, latest=False))
            return to_offsets(latest)

        result: Offsets = asyncio.run(_with_cluster(self.opts, work))
        return result

    def _reset(self, ref: QueueRef, at: int, bounds: Bounds) -> int:
        """``ref`` now ends before ``at``, where the checkpoint reads it from: the queue was reset (the
        topic deleted and re-created, or its offsets reset). Raise (failOnDataLoss), else say so and read
        it again from its earliest offset, as a queue that appears later is read, so nothing of the new
        queue is skipped (Kafka's source goes on from a reset partition's new end, which skips what the
        new one holds already). Only visible while the new queue is shorter than ``at``: once it is
        longer, offsets alone cannot tell (Kafka's cannot either)."""
        what = (
            f"queue {ref} was reset: the stream reads it from offset {at}, but it now holds {bounds.low} to "
            f"{bounds.high} (the topic was deleted and re-created, or the queue's offsets reset)"
        )
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"{what}. Set failOnDataLoss=false to read it again from its earliest offset and go on"
            )
        log.warning("%s: reading it again from offset %d (failOnDataLoss=false)", what, bounds.low)
        return bounds.low

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin, until = from_offsets(start), from_offsets(end)
        # a queue new in ``end`` or entering from UNRESOLVED (at n, or still UNRESOLVED): nothing to read
        ranges = [
            QueueRange(ref, n if begin.get(ref, UNRESOLVED) == UNRESOLVED else begin[ref], n)
            for ref, n in sorted(until.items())
        ]
        return [QueuePartition(r) for r in split(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueuePartition)
        return read_range(self.opts, partition.range)

    def commit(self, end: Offsets) -> None:
        group = self.opts.commit_group
        if group is None:
            return
        positions = {ref: n for ref, n in from_offsets(end).items() if n != UNRESOLVED}

        async def work(cluster: Cluster) -> None:
            await cluster.queues()
            await cluster.commit(positions, group)

        try:
            asyncio.run(_with_cluster(self.opts, work))
        except CALL_FAILED as exc:
            # best effort (only mqadmin's lag shows it): Spark fails the query when commit() raises, and
            # the next micro-batch's commit repeats these offsets anyway; once a micro-batch at most
            log.warning("could not commit the stream's offsets for group %s: %s", group, exc)
