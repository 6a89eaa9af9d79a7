"""The arguments of a publication, shared by ``rocksidecar spark-publish`` (pipeline.cli) and
spark-submit's entry point (pipeline.publish_job); no pyspark import, so --help starts no JVM."""

from __future__ import annotations

import argparse
import os

from .options import DEFAULT_BATCH_SIZE, DEFAULT_ENDPOINT

FORMATS = ("parquet", "json", "csv")
DESCRIPTION = (
    "Publish every row of a Parquet, JSON or CSV dataset as a message to a RocketMQ topic, through the "
    "sidecar's HTTP API, with a Spark job (local unless run by spark-submit)."
)
TOKEN_ENV = "ROCKSIDECAR_AUTH_TOKEN"


def _option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", required=True, metavar="PATH", help="file or directory to read")
    p.add_argument("--format", required=True, choices=FORMATS, help="input format (CSV: with a header row)")
    p.add_argument("--topic", required=True, help="RocketMQ topic to publish to")
    p.add_argument(
        "--key-column", metavar="C", help="message keys from this column (string or array<string>)"
    )
    p.add_argument("--tags-column", metavar="C", help="message tag from this column")
    p.add_argument(
        "--body-column",
        metavar="C",
        help="message body from this column (default: 'body', else the row as JSON)",
    )
    p.add_argument(
        "--endpoint", default=DEFAULT_ENDPOINT, help=f"the sidecar's HTTP API (default {DEFAULT_ENDPOINT})"
    )
    p.add_argument(
        "--job-id",
        metavar="ID",
        help="stable id of this publication: running the job again with it (within the sidecar's "
        "idempotency window, 24 h by default) sends nothing twice. Default: a new id per run",
    )
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="messages per request")
    p.add_argument(
        "--option",
        type=_option,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other option of the rocksidecar data source (e.g. shardingKeyColumn=customer); repeatable",
    )
    p.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    p.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV, ""),
        help=f"bearer token for the sidecar (default ${TOKEN_ENV})",
    )
