"""Pre-filling a store for the benchmarks: millions of keys written in bounded chunks, synced once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import RocksKV

CHUNK = 10_000  # items per write: bounded memory for millions of keys


def bulk_write(path: Path, column_families: Iterable[str], n: int, puts: Callable[[int], list[Put]]) -> None:
    """Write ``puts(i)`` for i in range(n) into the store at ``path``, unsynced, then sync the WAL once."""
    kv = RocksKV.open(path, column_families)
    try:
        for start in range(0, n, CHUNK):
            kv.write([op for i in range(start, min(n, start + CHUNK)) for op in puts(i)], sync=False)
        kv.sync_wal()
    finally:
        kv.close()
