"""What metrics, the admin API and /ui tell of transactions: decisions by outcome since start and the
undecided ones (how many, since when), kept by the coordinator (its ``stats``) as it begins and decides.

Outcomes: ``committed`` and ``rolled_back`` (the app decided through the API), ``checked_commit`` and
``checked_rollback`` (a broker's check-back of an undecided one, the app's check endpoint decided),
``unknown`` (a check-back of an undecided one answered UNKNOWN: the broker asks again later)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rocksidecar.rmq.producer.transaction import TransactionState

from .records import UNDECIDED_BROKER, UNDECIDED_LOCAL, Decision, Record, TransactionRecords

OUTCOMES = ("committed", "rolled_back", "checked_commit", "checked_rollback", "unknown")
MAX_TRACKED = 100_000  # undecided ones tracked for the oldest age; the rest are counted, not timed
DECIDED_OUTCOME = {Decision.COMMIT: "committed", Decision.ROLLBACK: "rolled_back"}
_CHECKED = {TransactionState.COMMIT: "checked_commit", TransactionState.ROLLBACK: "checked_rollback"}


class TransactionStats:
    """Outcome counts since start and the begin time of each undecided transaction (read from the
    records once at start, then kept as transactions begin and are decided)."""

    def __init__(self, records: TransactionRecords, now_ms: Callable[[], int]) -> None:
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self._now_ms = now_ms
        undecided = UNDECIDED_BROKER + UNDECIDED_LOCAL
        self._undecided = {
            r.id: r.created_ms for page, _ in records.open_ring(b"", undecided, MAX_TRACKED) for r in page
        }

    def begun(self, record: Record) -> None:
        if len(self._undecided) < MAX_TRACKED:
            self._undecided[record.id] = record.created_ms

    def decided(self, tx_id: str, outcome: str) -> bool:
        """Count ``outcome`` if ``tx_id`` was undecided here (a repeat decides nothing)."""
        if self._undecided.pop(tx_id, None) is None:
            return False
        self.outcomes[outcome] += 1
        return True

    def checked(self, tx_id: str, state: TransactionState) -> None:
        """A broker's check-back was answered ``state``: an undecided one is decided, or asked again."""
        outcome = _CHECKED.get(state)
        if outcome is not None:
            self.decided(tx_id, outcome)
        elif tx_id in self._undecided:
            self.outcomes["unknown"] += 1

    def undecided(self) -> tuple[int, float | None]:
        """How many are undecided, and the oldest one's age in seconds (None: none)."""
        if not self._undecided:
            return 0, None
        return len(self._undecided), max(self._now_ms() - min(self._undecided.values()), 0) / 1000

    def to_json(self) -> dict[str, Any]:
        count, age = self.undecided()
        return {"undecided": count, "oldestUndecidedAgeS": age, "outcomes": dict(self.outcomes)}
