"""A local SparkSession with the rocksidecar data source registered, for the test suites and the jobs
the tests start: no UI, quiet logs, the workers on this interpreter (this venv has pyarrow, pipeline)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from rocksidecar.pipeline import register


def local_spark(master: str, app: str, **conf: str) -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master).appName(app).config("spark.ui.enabled", "false")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
