"""A Spark job of its own process for test_spark_source: copies a topic through the sidecar, reading with
the rocksidecar source and writing with its sink, each row's id its origin (idColumn), with
trigger(availableNow=True), so a run ends once it has copied what the topic held when it started.

    python -m tests.realbroker.spark_copy_job NAMESRV SOURCE TARGET ENDPOINT CHECKPOINT MAX_PER_TRIGGER

The test SIGKILLs it (its whole process group: driver, JVM, Python workers) and starts it again on the
same checkpoint."""

from __future__ import annotations

import sys


def main(namesrv: str, source: str, target: str, endpoint: str, checkpoint: str, per_trigger: str) -> None:
    from rocksidecar.pipeline import origin_column
    from tests.pipeline.spark_local import local_spark

    spark = local_spark("local[2]", "spark6-copy")
    rows = (
        spark.readStream.format("rocksidecar")
        .option("namesrv", namesrv)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .select("body", "tags", origin_column().alias("origin"))
    )
    query = (
        rows.writeStream.format("rocksidecar")
        .option("topic", target)
        .option("endpoint", endpoint)
        .option("idColumn", "origin")
        .option("tagsColumn", "tags")
        .option("batchSize", "100")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    main(*sys.argv[1:])
