"""The spark-publish job: read a dataset, write it with the rocksidecar data source, print the counts,
and exit non-zero unless every row was accepted. Runs from ``rocksidecar spark-publish``, or with
``spark-submit pipeline/publish_job.py ARGS`` / ``python -m rocksidecar.pipeline.publish_job ARGS``.
spark-submit runs it as a script, so its imports are absolute."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from rocksidecar.pipeline import options
from rocksidecar.pipeline.arguments import DESCRIPTION, add_arguments
from rocksidecar.pipeline.reachable import unreachable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OK, NOT_ACCEPTED, BAD_USAGE = 0, 1, 2
_GLOB = re.compile(r"[*?\[{]")  # Spark expands these itself
# a JVM exception's line in Py4J's text: ": org.apache.spark.SparkException: [...] text", "Caused by: ..."
_JVM_LINE = re.compile(r"^(?::\s*|Caused by:\s*)?(?:[\w$]+\.)+\w*(?:Exception|Error): (.+)$", re.MULTILINE)
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+Error): (.*)$", re.MULTILINE)


def data_source_options(args: argparse.Namespace, report_path: str | None) -> dict[str, str]:
    """The data source's options: the job's own, then --option (Spark option names ignore case:
    --option batchsize=9 wins), then ``report_path``, the job's own report file, which it reads its
    counts from; a --option reportPath gets the same lines (publish copies them). None: the user's
    reportPath, if any, stays (to check the options before Spark starts)."""
    given = {
        "topic": args.topic,
        "endpoint": args.endpoint,
        "batchSize": str(args.batch_size),
        "keyColumn": args.key_column,
        "tagsColumn": args.tags_column,
        "bodyColumn": args.body_column,
        "jobId": args.job_id,
        "token": args.token or None,
    }
    opts = {k: v for k, v in given.items() if v}
    for name, value in [*args.option, *([("reportPath", report_path)] if report_path is not None else [])]:
        opts = {k: v for k, v in opts.items() if k.lower() != name.lower()}
        opts[name] = value
    return opts


def user_report_path(args: argparse.Namespace) -> str | None:
    """The file a --option reportPath names (the last one given), if any."""
    paths = [value for name, value in args.option if name.lower() == "reportpath"]
    return paths[-1] if paths and paths[-1] else None


def bad_usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments that can be told without Spark: the data source options (named
    as the user spelled them; Spark lower-cases them) and a local --input that is empty or does not
    exist."""
    try:
        options.parse(data_source_options(args, report_path=None))
    except options.OptionError as exc:
        return f"OptionError: {exc}"
    if not args.input.strip():
        return "--input is empty: give a file or directory"
    parts = urlsplit(args.input)
    # Without a scheme the path is on Spark's default file system: local only for a local Spark that
    # this command starts and no Hadoop configuration that could name another one.
    ours = "PYSPARK_GATEWAY_PORT" not in os.environ and "HADOOP_CONF_DIR" not in os.environ
    local = parts.scheme == "file" or (
        not parts.scheme and ours and (args.master or "local").startswith("local")
    )
    path = Path(parts.path if parts.scheme else args.input)
    if local and not _GLOB.search(args.input) and not path.exists():
        return f"--input {args.input}: no such file or directory"
    return None


def publish(spark: SparkSession, args: argparse.Namespace) -> int:
    """Run the job in ``spark``; print the counts; the exit code."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException, IllegalArgumentException

    from rocksidecar.pipeline.datasource import register

    register(spark)
    # FAILFAST: a line that does not parse fails the read. Spark's default (PERMISSIVE) makes it a row of
    # nulls plus a _corrupt_record column, which the whole-row JSON body would publish, with exit 0.
    reader = spark.read.format(args.format).option("mode", "FAILFAST")
    if args.format == "csv":
        reader = reader.option("header", "true")
    try:
        frame = reader.load(args.input)
        if args.format == "csv":
            # JSON's schema inference has parsed every line already; a CSV record is parsed only when
            # read, so read it all once (on the JVM, nothing kept) before any row is sent
            frame.write.format("noop").mode("overwrite").save()
    # no such path, no files, a schema that cannot be inferred, a path Hadoop refuses, a malformed line
    except (AnalysisException, IllegalArgumentException, Py4JJavaError) as exc:
        print(f"error: cannot read --input {args.input}: {_spark_reason(exc)}", file=sys.stderr)
        return BAD_USAGE
    mine = user_report_path(args)
    with tempfile.TemporaryDirectory(prefix="spark-publish-") as tmp:
        report = Path(tmp) / "report.jsonl"
        error: str | None = None
        try:
            writer = frame.write.format("rocksidecar").mode("append")
            writer.options(**data_source_options(args, str(report))).save()
        except Exception as exc:
            error = _reason(exc)
        lines = report.read_bytes().splitlines() if report.exists() else []
    if mine is not None and lines:
        try:
            with open(mine, "ab") as f:  # what the data source would have appended there
                f.write(b"".join(line + b"\n" for line in lines))
        except OSError as exc:
            error = error or f"--option reportPath={mine}: {exc.strerror or exc}"
    summary = orjson.loads(lines[-1]) if lines else None
    _print(args, summary, error)
    if summary is None:
        return BAD_USAGE if error and "OptionError" in error else NOT_ACCEPTED
    return OK if error is None and summary["accepted"] == summary["rows"] else NOT_ACCEPTED


def _spark_reason(exc: BaseException) -> str:
    """One line of why Spark could not read: the innermost line about a malformed record (CSV's quotes
    the record), else the error's first line; for a Py4J error, whose text is "An error occurred while
    calling ..." and the JVM's stack trace, its first exception's text."""
    found = [m.group(1).strip() for m in _JVM_LINE.finditer(str(exc))]
    malformed = [line for line in found if "Malformed" in line]
    if malformed:
        return malformed[-1]
    first = _first_line(exc)
    return found[0] if found and first.startswith("An error occurred while calling") else first


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reason(exc: BaseException) -> str:
    """Spark wraps our exception in a JVM one with the Python traceback inside: keep its last line."""
    found = _ERROR_LINE.findall(str(exc))
    if found:
        name, text = found[-1]
        return f"{name}: {text}"
    return _first_line(exc)


def _print(args: argparse.Namespace, summary: dict[str, Any] | None, error: str | None) -> None:
    out = sys.stdout
    print(f"spark-publish {args.input} ({args.format}) -> topic {args.topic} via {args.endpoint}", file=out)
    if summary is not None:
        print(
            f"rows {summary['rows']}: sent {summary['sent']}, spooled {summary['spooled']}, "
            f"scheduled {summary['scheduled']}, rejected {summary['rejected']}, "
            f"deduplicated {summary['deduplicated']} (FAILED answers retried: {summary['failed_retried']})",
            file=out,
        )
        for r in summary["rejections"][:20]:
            print(f"  rejected: partition {r['partition']} row {r['row']}: {r['error']}", file=out)
        if summary["missing_partitions"]:
            print(f"  {summary['missing_partitions']} partitions did not finish", file=out)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)


def run_job(args: argparse.Namespace, default_master: str = "local[*]") -> int:
    """Use the active SparkSession if there is one (then leave it running), else start one."""
    problem = bad_usage(args)
    if problem is not None:  # told before a JVM starts: one line, exit 2
        print(f"error: {problem}", file=sys.stderr)
        return BAD_USAGE
    # Also before a JVM: else every task retries an endpoint nobody answers at for minutes.
    down = unreachable(options.parse(data_source_options(args, report_path=None)).endpoint)
    if down is not None:
        print(
            f"error: {down} (start it, e.g. `make run`, or give its address with --endpoint)", file=sys.stderr
        )
        return NOT_ACCEPTED
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return publish(active, args)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # not launched by spark-submit: local workers must run this interpreter (pyarrow, pipeline)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(f"rocksidecar spark-publish {args.topic}")
    master = args.master or (None if "PYSPARK_GATEWAY_PORT" in os.environ else default_master)
    if master:
        builder = builder.master(master)
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    try:
        return publish(spark, args)
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="publish_job", description=DESCRIPTION)
    add_arguments(parser)
    return run_job(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
