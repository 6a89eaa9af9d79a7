"""``rocksidecar spark-publish``: publish a Parquet, JSON or CSV dataset to a topic through the sidecar with
a local Spark job. The arguments are in pipeline.arguments (no pyspark import, so --help starts no JVM);
the job is in pipeline.publish_job, which spark-submit can also run."""

from __future__ import annotations

import argparse

from .arguments import DESCRIPTION, add_arguments

__all__ = ["DESCRIPTION", "EPILOG", "HELP", "add_arguments", "run"]

HELP = "publish a dataset to a topic through the sidecar with Spark"
EPILOG = "Prints the counts; exits 0 if every row was accepted, 1 if any was not, 2 on bad arguments."


def run(args: argparse.Namespace) -> int:
    from .publish_job import run_job  # imported late: it starts Spark

    return run_job(args)
