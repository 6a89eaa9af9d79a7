"""spark-publish's arguments, told without a JVM: a mistyped --endpoint and an empty --input are one line
and exit 2 (not a traceback), and --option reportPath keeps the job's own counts and exit code while
still getting the report line the data source documents."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from rocksidecar.pipeline import publish_job
from rocksidecar.pipeline.arguments import add_arguments
from rocksidecar.pipeline.report import PartitionReport, WriteSummary, append_report


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--format", "json", "--topic", "T", *argv])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "in.json"
    path.write_text('{"body": "x"}\n')
    return path


def _one_line_exit_2(args: argparse.Namespace, capsys: pytest.CaptureFixture[str]) -> str:
    assert publish_job.run_job(args) == publish_job.BAD_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:abc", "http://[::1", "http://h:99999"])
def test_a_bad_endpoint_is_one_line_exit_2(
    data: Path, capsys: pytest.CaptureFixture[str], endpoint: str
) -> None:
    """Before: httpx.InvalidURL from the reachability check, or ValueError from urlsplit."""
    err = _one_line_exit_2(_args("--input", str(data), "--endpoint", endpoint), capsys)
    assert f"option endpoint={endpoint!r}" in err


@pytest.mark.parametrize("given", ["", " "])
def test_an_empty_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], given: str) -> None:
    """Before: Path('') is '.', which exists, so Spark got '' and raised IllegalArgumentException."""
    err = _one_line_exit_2(_args("--input", given), capsys)
    assert err == "error: --input is empty: give a file or directory\n"


class _FakeFrame:
    """Stands for the DataFrame, its reader and its writer: save() does what the rocksidecar data source
    does when every row is sent, i.e. appends its summary to the option reportPath (in any case)."""

    def __init__(self) -> None:
        self.opts: dict[str, str] = {}

    @property
    def write(self) -> _FakeFrame:
        return self

    def format(self, name: str) -> _FakeFrame:
        return self

    def mode(self, name: str) -> _FakeFrame:
        return self

    def option(self, name: str, value: str) -> _FakeFrame:
        return self

    def options(self, **opts: str) -> _FakeFrame:
        self.opts = opts
        return self

    def load(self, path: str) -> _FakeFrame:
        return self

    def save(self) -> None:
        paths = [v for k, v in self.opts.items() if k.lower() == "reportpath"]
        assert len(paths) == 1, self.opts
        summary = WriteSummary.of([PartitionReport(partition=0, rows=3, sent=3)])
        append_report(paths[0], summary, topic="T", aborted=False)


class _FakeSpark:
    def __init__(self) -> None:
        self.read = _FakeFrame()
        self.sparkContext = argparse.Namespace(pythonExec="/custom/python", master="local[1]")
        self.dataSource = argparse.Namespace(register=lambda cls: None)


@pytest.mark.parametrize("name", ["reportPath", "reportpath"])
def test_option_report_path_keeps_the_counts_and_exit_code(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Before: the option replaced the job's own report file, so a job that sent every row printed no
    counts and exited 1. Now the job's file wins and the user's gets the same line appended."""
    mine = tmp_path / "mine.jsonl"
    mine.write_bytes(b'{"earlier":true}\n')
    code = publish_job.publish(_FakeSpark(), _args("--input", str(data), "--option", f"{name}={mine}"))  # type: ignore[arg-type]
    assert code == publish_job.OK
    assert "rows 3: sent 3" in capsys.readouterr().out
    lines = [orjson.loads(line) for line in mine.read_bytes().splitlines()]
    assert lines[0] == {"earlier": True} and (lines[1]["rows"], lines[1]["accepted"]) == (3, 3)


def test_option_report_path_that_cannot_be_written_is_one_line_exit_2(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "no-such-dir" / "mine.jsonl"
    err = _one_line_exit_2(_args("--input", str(data), "--option", f"reportPath={mine}"), capsys)
    assert "option reportPath=" in err and "does not exist" in err
