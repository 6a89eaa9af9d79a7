"""MemoryKV: an in-memory KV with the same semantics as RocksKV, for fast tests of the layers above."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, Sequence

from .errors import StorageError
from .kv import Delete, DeleteRange, Op, Put


class MemoryKV:
    """Sorted key lists per column family; ``write`` is atomic because it validates before applying."""

    def __init__(self, column_families: Iterable[str]) -> None:
        self.column_families = tuple(column_families)
        self._keys: dict[str, list[bytes]] = {cf: [] for cf in self.column_families}
        self._values: dict[str, dict[bytes, bytes]] = {cf: {} for cf in self.column_families}
        self._closed = False

    def _cf(self, cf: str) -> tuple[list[bytes], dict[bytes, bytes]]:
        if self._closed:
            raise StorageError("store is closed")
        try:
            return self._keys[cf], self._values[cf]
        except KeyError:
            raise StorageError(f"unknown column family {cf!r}") from None

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self._cf(cf)[1].get(key)

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        values = self._cf(cf)[1]
        return [values.get(key) for key in keys]

    def scan(
        self, cf: str, *, lower: bytes | None = None, upper: bytes | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        for item in self.iterate(cf, lower=lower, upper=upper):
            if limit is not None and len(out) >= limit:
                break
            out.append(item)
        return out

    def iterate(
        self, cf: str, *, lower: bytes | None = None, upper: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        keys, values = self._cf(cf)
        start = 0 if lower is None else bisect.bisect_left(keys, lower)
        stop = len(keys) if upper is None else bisect.bisect_left(keys, upper)
        # A snapshot of the slice, as a RocksDB iterator reads a consistent view.
        return iter([(k, values[k]) for k in keys[start:stop]])

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        for op in ops:
            self._cf(op.cf)
        for op in ops:
            keys, values = self._cf(op.cf)
            if isinstance(op, Put):
                if op.key not in values:
                    bisect.insort(keys, op.key)
                values[op.key] = op.value
            elif isinstance(op, Delete):
                if values.pop(op.key, None) is not None:
                    del keys[bisect.bisect_left(keys, op.key)]
            elif isinstance(op, DeleteRange):
                lo, hi = bisect.bisect_left(keys, op.begin), bisect.bisect_left(keys, op.end)
                for key in keys[lo:hi]:
                    del values[key]
                del keys[lo:hi]

    def sync_wal(self) -> None:
        self._cf(self.column_families[0])

    def compact(self, cf: str, begin: bytes | None = None, end: bytes | None = None) -> None:
        self._cf(cf)

    def count(self, cf: str, *, stop: threading.Event | None = None) -> int:
        if stop is not None and stop.is_set():
            raise StorageError("count stopped")
        return len(self._cf(cf)[0])

    def approximate_count(self, cf: str) -> int:
        return self.count(cf)

    def close(self) -> None:
        self._closed = True
