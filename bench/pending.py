"""Pre-filled retry stores for the benchmarks: pending keys written as spool writes them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.bulk import bulk_write
from rocksidecar.retry.keys import COLUMN_FAMILIES, INDEX_CF, PENDING, PENDING_CF, index_key, pending_key
from rocksidecar.retry.record import RetryRecord, encode_record
from rocksidecar.storage.kv import Put


def fill_pending(path: Path, n: int, record_due: Callable[[int], tuple[RetryRecord, int]]) -> None:
    """n pending records (value + index), the i-th with the record and due time ``record_due(i)``."""

    def puts(i: int) -> list[Put]:
        r, due = record_due(i)
        key = pending_key(due, 0, r.type, r.id)
        return [Put(PENDING_CF, key, encode_record(r)), Put(INDEX_CF, index_key(r.id, PENDING, key), b"")]

    bulk_write(path, COLUMN_FAMILIES, n, puts)
