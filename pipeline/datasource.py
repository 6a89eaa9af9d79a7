"""The ``rocksidecar`` PySpark data source: ``df.write.format("rocksidecar")`` and
``writeStream.format("rocksidecar")`` publish each row as a message through the sidecar's HTTP API.
Options are checked on the driver; each task publishes its partition; commit fails on rejected rows.
``spark.read``/``readStream.format("rocksidecar")`` read topics from the brokers (pipeline.source)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql import Row, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from . import options as options_mod
from . import read_options
from .client import SidecarClient
from .message import MessageBuilder
from .options import OptionError, WriteOptions
from .publisher import PartitionPublisher
from .report import PartitionReport, RejectedRowsError, WriteSummary, append_report

NAME = "rocksidecar"
# set by Spark's MicroBatchExecution on every task of a micro-batch; both survive a restart from the
# same checkpoint, which is what makes a replayed micro-batch repeat its keys
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class PartitionCommit(WriterCommitMessage):
    report: PartitionReport


def _task() -> TaskContext:
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError(f"{NAME}: write() runs in a Spark task; there is no TaskContext")
    return ctx


def _publish(opts: WriteOptions, key_prefix: str, rows: Iterator[Row]) -> PartitionCommit:
    ctx = _task()
    partition = ctx.partitionId()
    agent = f"rocksidecar-spark (stage {ctx.stageId()}, partition {partition}, attempt {ctx.attemptNumber()})"
    client = SidecarClient(
        opts.endpoint,
        token=opts.token,
        timeout_s=opts.timeout_s,
        max_retries=opts.max_retries,
        backoff=opts.backoff(),
        ack=opts.ack,
        user_agent=agent,
    )
    with client:
        publisher = PartitionPublisher(
            client,
            MessageBuilder(opts),
            key_prefix,
            partition,
            batch_size=opts.batch_size,
            batch_bytes=opts.max_batch_bytes,
        )
        return PartitionCommit(publisher.publish(row.asDict(recursive=True) for row in rows))


def _finish(
    opts: WriteOptions, messages: Sequence[WriterCommitMessage | None], aborted: bool, batch_id: int | None
) -> None:
    reports = [m.report if isinstance(m, PartitionCommit) else None for m in messages]
    summary = WriteSummary.of(reports)
    if aborted and summary.missing_partitions == 0:
        return  # every task reported: Spark aborts because commit() raised, and commit() reported
    if opts.report_path:
        append_report(opts.report_path, summary, topic=opts.topic, aborted=aborted, batch_id=batch_id)
    if summary.rejected and not aborted:
        raise RejectedRowsError(summary, "" if batch_id is None else f" in micro-batch {batch_id}")


class BatchWriter(DataSourceWriter):
    """Created once per write on the driver and pickled to every task attempt, so ``job_id`` (and so
    every Idempotency-Key) is the same when Spark re-runs a task, and differs between two writes."""

    def __init__(self, opts: WriteOptions, job_id: str) -> None:
        self.opts = opts
        self.job_id = job_id

    def write(self, iterator: Iterator[Row]) -> PartitionCommit:
        # with an idColumn the keys name the rows themselves: the partition is not part of them
        prefix = self.job_id if self.opts.column("idColumn") else f"{self.job_id}:p{_task().partitionId()}"
        return _publish(self.opts, prefix, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _finish(self.opts, messages, aborted=False, batch_id=None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _finish(self.opts, messages, aborted=True, batch_id=None)


class StreamWriter(DataSourceStreamWriter):
    """Keys are ``<jobId or query id>:e<batch id>:p<partition>:b<n>``, or with an idColumn
    ``<jobId or query id>:i<digest of the batch's ids>``: a micro-batch replayed after a failure or a
    restart from the checkpoint repeats them, so the sidecar does not send twice."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> PartitionCommit:
        ctx = _task()
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if batch is None or (query is None and self.opts.job_id is None):
            raise RuntimeError(f"{NAME}: this task has no streaming query id or micro-batch id")
        job = self.opts.job_id or query
        assert job is not None  # checked above
        # with an idColumn the keys name the rows (ids_key), whichever micro-batch and partition hold them
        prefix = job if self.opts.column("idColumn") else f"{job}:e{batch}:p{ctx.partitionId()}"
        return _publish(self.opts, prefix, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _finish(self.opts, messages, aborted=False, batch_id=batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _finish(self.opts, messages, aborted=True, batch_id=batchId)


class RocksidecarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def _checked(self, schema: StructType, overwrite: bool) -> WriteOptions:
        if overwrite:
            raise OptionError(f"{NAME} can only append to a topic: use .mode('append')")
        opts = options_mod.parse(dict(self.options))
        return options_mod.check_schema(opts, {f.name: f.dataType.simpleString() for f in schema.fields})

    def schema(self) -> str:
        """The rows a read gives (README "Reading a topic"), as DDL: parsed by Spark on the JVM side
        (this runs in a Python worker without a session); writes take the DataFrame's own schema."""
        from .source import SCHEMA

        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from .source import BatchReader  # pyarrow and the RocketMQ client only when reading

        return BatchReader(read_options.parse(dict(self.options), streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .source import StreamReader

        return StreamReader(read_options.parse(dict(self.options), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        opts = self._checked(schema, overwrite)
        return BatchWriter(opts, opts.job_id or uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(self._checked(schema, overwrite))


def register(spark: SparkSession) -> None:
    """Make ``format("rocksidecar")`` available in this session."""
    _workers_run_this_python(spark)
    spark.dataSource.register(RocksidecarDataSource)


def _workers_run_this_python(spark: SparkSession) -> None:
    """Without PYSPARK_PYTHON, Python workers run ``python3`` from the PATH, which for a script started as
    ``.venv/bin/python job.py`` is not the venv's and lacks httpx. With a local master the workers run on
    this machine, so this interpreter is the right one; the registration fixes the workers' Python."""
    sc = spark.sparkContext
    if (
        "PYSPARK_PYTHON" in os.environ
        or sc.pythonExec != "python3"
        or not (sc.master or "").startswith("local")
    ):
        return  # chosen on purpose, or workers on other machines where this path may not exist
    sc.pythonExec = sys.executable
