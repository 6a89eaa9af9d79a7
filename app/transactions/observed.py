"""What metrics, the admin API and /ui tell of transactions: decisions by outcome since start and the
undecided ones (how many, since when), kept by the coordinator (its ``stats``) as it begins and decides.

Outcomes: ``committed`` and ``rolled_back`` (the app decided through the API), ``checked_commit`` and
``checked_rollback`` (the app's check endpoint decided an undecided one: asked on a broker's check-back,
or by the local outbox's, coordinator.check_undecided),
``unknown`` (a check of an undecided one answered UNKNOWN, a broker's check-back or the local outbox's:
it is asked again later)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .records import UNDECIDED_BROKER, UNDECIDED_LOCAL, Decision, Record, TransactionRecords

OUTCOMES = ("committed", "rolled_back", "checked_commit", "checked_rollback", "unknown")
MAX_TRACKED = 100_000  # undecided ones tracked for the oldest age; the rest are counted, not timed
DECIDED_OUTCOME = {Decision.COMMIT: "committed", Decision.ROLLBACK: "rolled_back"}  # through the API
CHECKED_OUTCOME = {Decision.COMMIT: "checked_commit", Decision.ROLLBACK: "checked_rollback"}  # check endpoint


class TransactionStats:
    """Outcome counts since start, how many transactions are undecided and the begin time of each of the
    first MAX_TRACKED of them (read from the records once at start, then kept as transactions begin and
    are decided). The callers say what the store now holds: ``begun`` for a transaction now undecided
    that was not counted yet, ``decided`` for one that was undecided until the decision they wrote."""

    def __init__(self, records: TransactionRecords, now_ms: Callable[[], int]) -> None:
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self._now_ms = now_ms
        undecided = UNDECIDED_BROKER + UNDECIDED_LOCAL
        self._timed = {
            r.id: r.created_ms for page, _ in records.open_ring(b"", undecided, MAX_TRACKED) for r in page
        }
        # All of them, from the open index alone (no record past the first MAX_TRACKED is read); after
        # open_ring, which corrects the entries it reads
        self._count = records.count_open(undecided)

    def begun(self, record: Record) -> None:
        self._count += 1
        if len(self._timed) < MAX_TRACKED:
            self._timed[record.id] = record.created_ms

    def decided(self, tx_id: str, outcome: str) -> None:
        """``tx_id``, undecided until now, was decided ``outcome`` (timed or not)."""
        self._count = max(self._count - 1, 0)
        self._timed.pop(tx_id, None)
        self.outcomes[outcome] += 1

    def asked_again(self) -> None:
        """A check of an undecided one (a broker's check-back or the local outbox's) was answered
        UNKNOWN: it is asked again later."""
        self.outcomes["unknown"] += 1

    def undecided(self) -> tuple[int, float | None]:
        """How many are undecided, and the oldest timed one's age in seconds (None: none is timed)."""
        if not self._count or not self._timed:
            return self._count, None
        return self._count, max(self._now_ms() - min(self._timed.values()), 0) / 1000

    def to_json(self) -> dict[str, Any]:
        count, age = self.undecided()
        return {"undecided": count, "oldestUndecidedAgeS": age, "outcomes": dict(self.outcomes)}
