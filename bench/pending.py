"""Pre-filled retry stores for the benchmarks: pending keys written as spool writes them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rocksidecar.retry.keys import COLUMN_FAMILIES, INDEX_CF, PENDING, PENDING_CF, index_key, pending_key
from rocksidecar.retry.record import RetryRecord, encode_record
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import RocksKV

CHUNK = 10_000  # keys per write: bounded memory for millions of keys


def fill_pending(path: Path, n: int, record_due: Callable[[int], tuple[RetryRecord, int]]) -> None:
    """n pending records (value + index), the i-th with the record and due time ``record_due(i)``."""
    kv = RocksKV.open(path, COLUMN_FAMILIES)
    try:
        for start in range(0, n, CHUNK):
            ops: list[Put] = []
            for i in range(start, min(n, start + CHUNK)):
                r, due = record_due(i)
                key = pending_key(due, 0, r.type, r.id)
                ops += [
                    Put(PENDING_CF, key, encode_record(r)),
                    Put(INDEX_CF, index_key(r.id, PENDING, key), b""),
                ]
            kv.write(ops, sync=False)
        kv.sync_wal()
    finally:
        kv.close()
