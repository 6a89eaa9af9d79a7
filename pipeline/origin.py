"""Output message ids derived from where the source message was read: (topic, broker, queueId,
queueOffset) names one message of a RocketMQ cluster for good, so a transform that keeps it as the
sink's ``idColumn`` gives every output message an id that is the same on every attempt, replay and
restart. The sink keys its requests by these ids (publisher.ids_key), so the sidecar stores each one once.

    out = spark.readStream.format("rocksidecar")...load().select("body", origin_column().alias("id"))
    out.writeStream.format("rocksidecar").option("idColumn", "id")...

No pyspark import until ``origin_column`` is called."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

# the read source's columns that name a message; topic names have no "/", queueId and offset are numbers
ORIGIN_COLUMNS = ("topic", "broker", "queueId", "queueOffset")


def origin_id(topic: str, broker: str, queue_id: int, queue_offset: int) -> str:
    """``topic/broker/queueId/queueOffset``: the id ``origin_column`` computes, for Python code (UDFs,
    foreachBatch, tests)."""
    return f"{topic}/{broker}/{queue_id}/{queue_offset}"


def origin_column() -> Column:
    """The column ``origin_id`` of each row read by ``format("rocksidecar")``."""
    from pyspark.sql import functions as F

    return F.concat_ws("/", *(F.col(c).cast("string") for c in ORIGIN_COLUMNS))
