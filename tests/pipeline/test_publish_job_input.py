"""spark-publish on the shared local Spark against the fake sidecar (the reachability check stubbed: the
fake serves only POST /v1/messages:batch): JSON and CSV are read in FAILFAST mode, so a malformed line
fails the job with one line naming --input before any row is sent (Spark's PERMISSIVE default published it
as a row of nulls plus _corrupt_record, and exited 0); a path Spark refuses is one line too."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rocksidecar.pipeline import publish_job
from rocksidecar.pipeline.arguments import add_arguments
from tests.pipeline.fake_sidecar import FakeSidecar

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def endpoint(fake_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(publish_job, "unreachable", lambda endpoint: None)
    yield fake_url


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("fmt", "text", "why"),
    [
        ("json", '{"id": 1, "name": "a"}\n{oops\n{"id": 2, "name": "b"}\n', "Malformed records"),
        ("csv", "id,body\n1,a\n2,b,extra\n3,c\n", "Malformed CSV record: 2,b,extra"),
    ],
)
def test_a_malformed_line_fails_the_job_before_any_row_is_sent(
    spark: SparkSession,
    fake: FakeSidecar,
    endpoint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fmt: str,
    text: str,
    why: str,
) -> None:
    data = tmp_path / f"in.{fmt}"
    data.write_text(text)
    code = publish_job.run_job(
        _args("--input", str(data), "--format", fmt, "--topic", "T", "--endpoint", endpoint)
    )
    err = capsys.readouterr().err
    assert code == publish_job.BAD_USAGE and fake.requests == []
    assert err.startswith(f"error: cannot read --input {data}: ") and why in err and err.count("\n") == 1, err


def test_well_formed_csv_is_published(
    spark: SparkSession, fake: FakeSidecar, endpoint: str, tmp_path: Path
) -> None:
    data = tmp_path / "in.csv"
    data.write_text("id,body\n1,a\n2,\n3,c\n")  # an empty field is a null, not a malformed record
    code = publish_job.run_job(
        _args("--input", str(data), "--format", "csv", "--topic", "T", "--endpoint", endpoint)
    )
    assert code == publish_job.NOT_ACCEPTED  # row 2's empty body is rejected, as before
    assert sorted(fake.bodies()) == ["a", "c"]


def test_a_path_spark_refuses_is_one_line_exit_2(
    spark: SparkSession, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """bad_usage() refuses an empty --input; publish() also turns Spark's IllegalArgumentException at
    load (here from the same empty path, given to it directly) into one line."""
    args = _args("--input", "", "--format", "parquet", "--topic", "T", "--endpoint", endpoint)
    assert publish_job.publish(spark, args) == publish_job.BAD_USAGE
    err = capsys.readouterr().err
    assert err == "error: cannot read --input : Can not create a Path from an empty string\n", err
