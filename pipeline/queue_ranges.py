"""Offsets of the read source, pure: a queue's name in offset JSON, the per-queue offsets Spark keeps in
its checkpoint, ``maxOffsetsPerTrigger`` spread over the queues, an availableNow run's end, and offset
ranges cut into partitions (``minPartitions``)."""

from __future__ import annotations

from dataclasses import dataclass

# topic -> "broker:queueId" -> offset: what Spark writes into the checkpoint (JSON, primitive values)
Offsets = dict[str, dict[str, int]]
# A stream's offset for a queue whose broker did not answer when the stream started: it enters where
# startingOffsets puts it once the broker answers (not -1/-2, which mean latest/earliest in that JSON).
UNRESOLVED = -3


@dataclass(frozen=True, slots=True, order=True)
class QueueRef:
    topic: str
    broker: str
    queue_id: int

    @property
    def key(self) -> str:
        return f"{self.broker}:{self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker}:{self.queue_id}"

    @classmethod
    def of(cls, topic: str, key: str) -> QueueRef:
        broker, _, qid = key.rpartition(":")
        return cls(topic, broker, int(qid))


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one queue: one input partition's work."""

    queue: QueueRef
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_offsets(positions: dict[QueueRef, int]) -> Offsets:
    out: Offsets = {}
    for ref in sorted(positions):
        out.setdefault(ref.topic, {})[ref.key] = positions[ref]
    return out


def from_offsets(offsets: Offsets) -> dict[QueueRef, int]:
    return {QueueRef.of(topic, key): int(n) for topic, queues in offsets.items() for key, n in queues.items()}


def cap(start: dict[QueueRef, int], latest: dict[QueueRef, int], max_rows: int) -> dict[QueueRef, int]:
    """``latest`` limited to ``max_rows`` offsets past ``start`` in all: each queue gets its share of the
    limit in proportion to what it has waiting (as Spark's Kafka source does), the rounding remainder
    going to the queues in order, so a small limit still moves every queue that has messages, in time."""
    waiting = {ref: max(0, latest[ref] - start.get(ref, latest[ref])) for ref in latest}
    total = sum(waiting.values())
    if total <= max_rows:
        return dict(latest)
    share = {ref: waiting[ref] * max_rows // total for ref in sorted(waiting)}
    left = max_rows - sum(share.values())
    for ref in sorted(waiting, key=lambda r: (-(waiting[r] - share[r]), r)):
        if left == 0:
            break
        if share[ref] < waiting[ref]:
            share[ref] += 1
            left -= 1
    return {ref: start.get(ref, latest[ref]) + share[ref] for ref in latest}


def hold_at(
    begin: dict[QueueRef, int], latest: dict[QueueRef, int], target: dict[QueueRef, int]
) -> dict[QueueRef, int]:
    """``latest`` held at an availableNow run's ``target``: no queue goes past it (nor back before where
    it is), and a queue the target does not know does not enter, so the run comes to an end."""
    out = {}
    for ref, n in latest.items():
        if ref in target:
            out[ref] = max(begin[ref], min(n, target[ref])) if ref in begin else n
        elif ref in begin:
            out[ref] = begin[ref]
    return out


def split(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """One range per queue; with ``min_partitions`` above the number of non-empty ranges, the bigger
    ranges are cut into consecutive pieces in proportion to their size (Kafka's range calculator)."""
    work = [r for r in ranges if r.size > 0]
    if not min_partitions or len(work) >= min_partitions:
        return work
    total = sum(r.size for r in work)
    out: list[QueueRange] = []
    for r in work:
        pieces = max(1, min(r.size, -(-r.size * min_partitions // total)))  # ceil: at least minPartitions
        step, extra = divmod(r.size, pieces)
        at = r.start
        for i in range(pieces):
            n = step + (1 if i < extra else 0)
            out.append(QueueRange(r.queue, at, at + n))
            at += n
    return out
