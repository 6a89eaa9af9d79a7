"""Options that used to pass the driver's checks and then fail every task, fail after every row was
sent, or be silently ignored, are refused up front with an OptionError naming the option: a token that
cannot be a header (its value not shown), an endpoint that is not a URL, a reportPath that cannot be
written, read options a query would ignore, and a batch read whose start is after its end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocksidecar.pipeline import options, read_options, source
from rocksidecar.pipeline.broker_read import Bounds
from rocksidecar.pipeline.datasource import PartitionCommit, _finish
from rocksidecar.pipeline.report import PartitionReport
from tests.pipeline.test_source_plan import A0, FakeCluster

NAMESRV = {"namesrv": "h:1", "topic": "T"}


@pytest.mark.parametrize("token", ["s3cr3t\n", "s3cr\u00e9t", "s3 cr3t", "s3cr3t\r\n"])
def test_a_token_that_cannot_be_a_header_is_refused_without_its_value(token: str) -> None:
    with pytest.raises(options.OptionError, match="option token") as info:
        options.parse({"topic": "T", "token": token})
    assert "s3" not in str(info.value)


def test_a_printable_token_and_no_token_pass() -> None:
    assert options.parse({"topic": "T", "token": "abc.DEF-123_~+/="}).token == "abc.DEF-123_~+/="
    assert options.parse({"topic": "T"}).token == ""


def test_a_job_id_with_a_trailing_newline_is_refused() -> None:
    """The Idempotency-Key is built from it: a newline would make every request unsendable."""
    with pytest.raises(options.OptionError, match="option jobId"):
        options.parse({"topic": "T", "jobId": "daily\n"})


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("http://127.0.0.1:abc", "Port could not be cast"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://h:99999", "Port out of range"),
        ("http://:9880", "with a host"),
        ("ftp://h:1", "with a host"),
        ("http://exa mple:1", "a space"),
    ],
)
def test_an_endpoint_that_is_not_a_url_is_refused_naming_it(endpoint: str, why: str) -> None:
    with pytest.raises(options.OptionError, match=re.escape(f"option endpoint={endpoint!r}") + f".*{why}"):
        options.parse({"topic": "T", "endpoint": endpoint})


def test_an_ipv6_endpoint_passes() -> None:
    assert options.parse({"topic": "T", "endpoint": "http://[::1]:9880/"}).endpoint == "http://[::1]:9880"


def test_a_report_path_that_cannot_be_written_is_refused_before_any_row_is_sent(tmp_path: Path) -> None:
    """Else the write publishes every row, then commit() fails with FileNotFoundError naming no option:
    save() raises after a complete publication, and a re-run (a new default jobId) sends it all again."""
    for path, why in [
        (tmp_path / "no-such-dir" / "report.jsonl", "does not exist"),
        (tmp_path, "is a directory"),
    ]:
        with pytest.raises(options.OptionError, match=f"option reportPath=.*{why}"):
            options.parse({"topic": "T", "reportPath": str(path)})


def test_a_writable_report_path_is_written_at_commit(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    opts = options.parse({"topic": "T", "reportPath": str(report)})
    _finish(
        opts, [PartitionCommit(PartitionReport(partition=0, rows=5, sent=5))], aborted=False, batch_id=None
    )
    assert b'"sent":5' in report.read_bytes()


@pytest.mark.parametrize(
    ("extra", "streaming", "why"),
    [
        ({"commitGroup": "g"}, False, "option commitGroup is for streaming queries only"),
        ({"securityToken": "tok"}, False, "option securityToken needs options accessKey and secretKey"),
        ({"securityToken": "tok"}, True, "option securityToken needs options accessKey and secretKey"),
        (
            {"startingOffsets": "2000000", "endingOffsets": "1000000"},
            False,
            "startingOffsets=2000000 is after endingOffsets=1000000",
        ),
    ],
)
def test_read_options_that_would_be_ignored_or_read_nothing_are_refused(
    extra: dict[str, str], streaming: bool, why: str
) -> None:
    with pytest.raises(options.OptionError, match=why):
        read_options.parse({**NAMESRV, **extra}, streaming=streaming)


def test_read_options_they_are_allowed_with_pass() -> None:
    stream = read_options.parse({**NAMESRV, "commitGroup": "g"}, streaming=True)
    keys = {"accessKey": "a", "secretKey": "s", "securityToken": "t"}
    signed = read_options.parse({**NAMESRV, **keys}, streaming=False)
    same = read_options.parse(
        {**NAMESRV, "startingOffsets": "1000", "endingOffsets": "1000"}, streaming=False
    )
    assert (stream.commit_group, signed.security_token, same.starting) == ("g", "t", 1000)


def _batch_plan(monkeypatch: pytest.MonkeyPatch, **opts: str) -> source.BatchReader:
    monkeypatch.setattr(source, "Cluster", FakeCluster({A0: Bounds(0, 100)}))
    return source.BatchReader(read_options.parse({**NAMESRV, **opts}, streaming=False))


def test_a_batch_whose_start_is_after_its_end_is_refused_naming_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planned as the empty range 50..50 before: an empty DataFrame and no word of why (Kafka's source
    fails: 'Beginning offset 50 is after the ending offset 10')."""
    why = re.escape(f"queue {A0}: startingOffsets gives offset 50, after offset 10")
    with pytest.raises(options.OptionError, match=why):
        _batch_plan(
            monkeypatch,
            startingOffsets='{"T": {"broker-a:0": 50}}',
            endingOffsets='{"T": {"broker-a:0": 10}}',
        )


def test_a_batch_whose_start_is_its_end_reads_nothing_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = _batch_plan(
        monkeypatch,
        startingOffsets='{"T": {"broker-a:0": 50}}',
        endingOffsets='{"T": {"broker-a:0": 50}}',
    )
    assert reader.ranges == []  # the empty range is no partition
