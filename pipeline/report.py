"""What one task (partition) published, what a whole write published, and the error naming the rows
the sidecar rejected. Plain picklable values: they travel from executors to the driver."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import orjson

MAX_NAMED = 100  # rejected rows named per partition; the count covers them all


@dataclass(frozen=True, slots=True)
class Rejection:
    row: str | int  # the rowIdColumn value, or the row's index within its partition
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RowCounts:
    """What became of the rows: counted per partition, and summed field by field over a whole write."""

    rows: int = 0
    sent: int = 0
    spooled: int = 0
    scheduled: int = 0
    deduplicated: int = 0  # stored by an earlier attempt or run with the same keys; not sent again
    rejected: int = 0
    failed_retried: int = 0  # re-posts of items answered FAILED (the sidecar could not store them yet)

    @property
    def accepted(self) -> int:
        return self.sent + self.spooled + self.scheduled + self.deduplicated


_COUNTS = tuple(f.name for f in fields(RowCounts))


@dataclass(frozen=True, slots=True)
class PartitionReport(RowCounts):
    partition: int
    requests: int = 0  # POSTs, counting retries of FAILED items but not transport-level repeats
    rejections: tuple[Rejection, ...] = ()


@dataclass(frozen=True, slots=True)
class WriteSummary(RowCounts):
    """The counts of a whole write (or one streaming micro-batch)."""

    partitions: int = 0
    missing_partitions: int = 0  # tasks that did not report (the write is being aborted)
    rejections: tuple[tuple[int, Rejection], ...] = field(default=())  # (partition, rejection)

    @classmethod
    def of(cls, reports: Sequence[PartitionReport | None]) -> WriteSummary:
        done = [r for r in reports if r is not None]
        return cls(
            partitions=len(done),
            **{name: sum(getattr(r, name) for r in done) for name in _COUNTS},
            missing_partitions=len(reports) - len(done),
            rejections=tuple(
                (r.partition, x) for r in sorted(done, key=lambda r: r.partition) for x in r.rejections
            ),
        )

    def counts(self) -> str:
        return (
            f"{self.rows} rows: {self.sent} sent, {self.spooled} spooled, {self.scheduled} scheduled, "
            f"{self.rejected} rejected, {self.deduplicated} deduplicated "
            f"({self.failed_retried} FAILED answers retried)"
        )

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["rejections"] = [{"partition": p, "row": x.row, "error": x.error} for p, x in self.rejections]
        doc["accepted"] = self.accepted
        return doc


class RejectedRowsError(Exception):
    """Some rows were rejected as bad input (an empty body here, the rest by the sidecar): they will never
    be published. The others were; the message names the rejected rows by partition and index (or
    rowIdColumn value)."""

    def __init__(self, summary: WriteSummary, where: str = "") -> None:
        self.summary = summary
        named = "; ".join(f"partition {p} row {x.row}: {x.error}" for p, x in summary.rejections[:20])
        more = summary.rejected - min(len(summary.rejections), 20)
        tail = f"; and {more} more" if more > 0 else ""
        super().__init__(
            f"{summary.rejected} of {summary.rows} rows were rejected{where}: "
            f"{named}{tail}. {summary.counts()}"
        )


def append_report(
    path: str, summary: WriteSummary, *, topic: str, aborted: bool, batch_id: int | None = None
) -> None:
    """One JSON line per finished write (or micro-batch), for jobs and people that want the counts."""
    doc = {"topic": topic, "batchId": batch_id, "aborted": aborted, **summary.to_json()}
    with open(path, "ab") as f:
        f.write(orjson.dumps(doc) + b"\n")
