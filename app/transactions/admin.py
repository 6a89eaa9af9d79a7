"""Transactions in the admin API and /ui: the open ones (undecided, or decided and not acknowledged by
the broker yet) or all of them, by id, filtered by topic and paged like the other admin listings (a
page reads a bounded number of records, so a filter that matches little never reads the whole store),
and the summary of TransactionStats.

Wired by passing ``transactions=transactions_view(coordinator)``  to AdminOps."""

from __future__ import annotations

from collections.abc import Callable

from rocksidecar.storage.query import Filter, Page, page

from ..api.admin import TransactionsView, Unreadable
from ..request import RequestError
from .coordinator import TransactionCoordinator
from .http import view
from .records import CF, INDEX, OPEN, OPEN_END, CorruptTransactionError, Record, TransactionRecords, kind


def _unfiltered(where: Filter) -> None:
    """Transactions are listed by id: the due-time filters and ``type`` name nothing of theirs."""
    for name, value in (
        ("type", where.type),
        ("dueAfter", where.due_after_ms),
        ("dueBefore", where.due_before_ms),
    ):
        if value is not None:
            raise RequestError(f"{name}: not a filter of transactions (topic is)", field=name)


def _reader(records: TransactionRecords, only_open: bool) -> Callable[..., Page[Record | Unreadable]]:
    def read(where: Filter, *, cursor: str | None = None, limit: int = 100) -> Page[Record | Unreadable]:
        _unfiltered(where)

        def listed(id_: str, get: Callable[[], Record | None]) -> Record | Unreadable | None:
            try:
                record = get()
            except CorruptTransactionError as exc:  # what from_value raises for a value not a record
                # Listed, with why, as the retry and delay listings list a corrupt value (the operator
                # sees the damage, not a failed page), and as they do only when no topic is asked for
                # (its own is unknown).
                return None if where.on_message else Unreadable(id_, f"{type(exc).__name__}: {exc}")
            if record is None or (only_open and kind(record) is None):  # gone, or decided since indexed
                return None
            return record if where.matches(record.topic, None) else None

        def indexed(key: bytes, _kind: bytes) -> Record | Unreadable | None:
            id_ = key[len(OPEN) :].decode(errors="replace")
            return listed(id_, lambda: records.get(id_))

        def stored(key: bytes, raw: bytes) -> Record | Unreadable | None:
            return listed(key.decode(errors="replace"), lambda: Record.from_value(raw))

        if only_open and records.swept:
            # The open index, not the records: a day's carried-out ones (kept KEEP_DECIDED_MS) would
            # otherwise fill the page's scan budget before the open ones are reached.
            return page(
                records.kv, CF, Filter(), indexed, cursor=cursor, limit=limit, above=OPEN, below=OPEN_END
            )
        # Ids are broker message ids (hex, 32 characters), all above the listing's lowest due-time key
        # and below the indexes kept beside them. (A store not swept into the index yet: its records.)
        return page(records.kv, CF, Filter(), stored, cursor=cursor, limit=limit, below=INDEX)

    return read


def transactions_view(coordinator: TransactionCoordinator) -> TransactionsView:
    records = coordinator.records
    return TransactionsView(
        sources={"open": (_reader(records, True), view), "all": (_reader(records, False), view)},
        summary=coordinator.stats.to_json,
    )
