"""Counts of a write from its tasks' reports, the report file's lines, and the error naming rejected
rows: commit reports and fails on rejections, abort reports only when tasks are missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocksidecar.pipeline.datasource import PartitionCommit, _finish
from rocksidecar.pipeline.options import WriteOptions
from rocksidecar.pipeline.report import PartitionReport, RejectedRowsError, Rejection, WriteSummary


def report(partition: int, sent: int, rejected: tuple[int, ...] = ()) -> PartitionReport:
    rejections = tuple(Rejection(i, "messages[0].body: the body is empty") for i in rejected)
    return PartitionReport(
        partition, rows=sent + len(rejected), sent=sent, rejected=len(rejected), rejections=rejections
    )


def test_summary_adds_up_and_sorts_rejections_by_partition() -> None:
    s = WriteSummary.of([report(1, 5, (7,)), None, report(0, 3, (2, 4))])
    assert (s.partitions, s.rows, s.sent, s.rejected, s.accepted, s.missing_partitions) == (2, 11, 8, 3, 8, 1)
    assert [(p, x.row) for p, x in s.rejections] == [(0, 2), (0, 4), (1, 7)]
    assert s.to_json()["rejections"][0] == {
        "partition": 0,
        "row": 2,
        "error": "messages[0].body: the body is empty",
    }


def test_deduplicated_rows_count_as_accepted_and_are_shown() -> None:
    s = WriteSummary.of([PartitionReport(0, rows=7, sent=2, deduplicated=5)])
    assert (s.rows, s.sent, s.deduplicated, s.accepted) == (7, 2, 5, 7)
    assert "7 rows: 2 sent, 0 spooled, 0 scheduled, 0 rejected, 5 deduplicated" in s.counts()
    assert s.to_json()["deduplicated"] == 5


def test_the_error_names_twenty_rows_and_counts_the_rest() -> None:
    s = WriteSummary.of([report(0, 10, tuple(range(25)))])
    text = str(RejectedRowsError(s, " in micro-batch 4"))
    assert text.startswith("25 of 35 rows were rejected in micro-batch 4: partition 0 row 0: ")
    assert "partition 0 row 19:" in text and "partition 0 row 20:" not in text
    assert "; and 5 more. 35 rows: 10 sent" in text


def test_commit_reports_then_fails_on_rejections(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    opts = WriteOptions(topic="T", report_path=str(path))
    _finish(opts, [PartitionCommit(report(0, 4))], aborted=False, batch_id=None)
    with pytest.raises(RejectedRowsError, match="1 of 3 rows were rejected in micro-batch 9"):
        _finish(opts, [PartitionCommit(report(0, 2, (5,)))], aborted=False, batch_id=9)
    # Spark calls abort after a commit that raised, with every message: nothing more to report
    _finish(opts, [PartitionCommit(report(0, 2, (5,)))], aborted=True, batch_id=9)
    # abort after a failed task: the finished tasks' counts are still reported
    _finish(opts, [PartitionCommit(report(0, 6)), None], aborted=True, batch_id=None)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [
        (x["batchId"], x["aborted"], x["sent"], x["rejected"], x["missing_partitions"]) for x in lines
    ] == [
        (None, False, 4, 0, 0),
        (9, False, 2, 1, 0),
        (None, True, 6, 0, 1),
    ]
    assert lines[0]["topic"] == "T" and lines[0]["accepted"] == 4
