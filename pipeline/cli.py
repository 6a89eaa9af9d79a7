"""``rocksidecar spark-publish``: publish a Parquet, JSON or CSV dataset to a topic through the sidecar with
a local Spark job. The arguments are in pipeline.arguments (no pyspark import, so --help starts no JVM);
the job is in pipeline.publish_job, which spark-submit can also run."""

from __future__ import annotations

import argparse

from pipeline.arguments import DESCRIPTION, add_arguments


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "spark-publish",
        help="publish a dataset to a topic through the sidecar with Spark",
        description=DESCRIPTION,
        epilog="Prints the counts; exits 0 if every row was accepted, 1 if any was not, 2 on bad arguments.",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipeline.publish_job import run_job  # imported late: it starts Spark

    return run_job(args)
