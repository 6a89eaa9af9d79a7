"""Transactions in the admin API and /ui: the open ones (undecided, or decided and not acknowledged by
the broker yet) or all of them, by id, filtered by topic and paged like the other admin listings (a
page reads a bounded number of records, so a filter that matches little never reads the whole store),
and the summary of TransactionStats.

Wired by passing ``transactions=transactions_view(coordinator)``  to AdminOps."""

from __future__ import annotations

from collections.abc import Callable

from rocksidecar.storage.query import Filter, Page, page

from ..api.admin import TransactionsView
from ..request import RequestError
from .coordinator import TransactionCoordinator
from .http import view
from .records import CF, INDEX, Decision, Record, TransactionRecords


def _unfiltered(where: Filter) -> None:
    """Transactions are listed by id: the due-time filters and ``type`` name nothing of theirs."""
    for name, value in (
        ("type", where.type),
        ("dueAfter", where.due_after_ms),
        ("dueBefore", where.due_before_ms),
    ):
        if value is not None:
            raise RequestError(f"{name}: not a filter of transactions (topic is)", field=name)


def _reader(records: TransactionRecords, only_open: bool) -> Callable[..., Page[Record]]:
    def read(where: Filter, *, cursor: str | None = None, limit: int = 100) -> Page[Record]:
        _unfiltered(where)

        def decode(_key: bytes, raw: bytes) -> Record | None:
            record = Record.from_value(raw)
            if only_open and record.decision is not Decision.NONE and record.acknowledged:
                return None
            return record if where.matches(record.topic, None) else None

        # Ids are broker message ids (hex, 32 characters), all above the listing's lowest due-time key
        # and below the indexes kept beside them.
        return page(records.kv, CF, Filter(), decode, cursor=cursor, limit=limit, below=INDEX)

    return read


def transactions_view(coordinator: TransactionCoordinator) -> TransactionsView:
    records = coordinator.records
    return TransactionsView(
        sources={"open": (_reader(records, True), view), "all": (_reader(records, False), view)},
        summary=coordinator.stats.to_json,
    )
