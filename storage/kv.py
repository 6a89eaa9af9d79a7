"""The bytes-level key-value protocol over named column families, and the write operations it applies.

retry/ and delay/ depend on this protocol only; RocksKV (RocksDB) and MemoryKV (tests) implement it,
and one contract suite runs against both.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

# Operations are NamedTuples rather than frozen dataclasses: a spool builds two per message, and
# tuple construction costs a third of a frozen dataclass's __init__ on this hot path.


class Put(NamedTuple):
    cf: str
    key: bytes
    value: bytes


class Delete(NamedTuple):
    cf: str
    key: bytes


class DeleteRange(NamedTuple):
    """Deletes every key in [begin, end)."""

    cf: str
    begin: bytes
    end: bytes


Op = Put | Delete | DeleteRange


class KV(Protocol):
    """Ordered bytes store with column families; keys compare bytewise.

    Every method raises storage.errors.StorageError on failure.
    """

    column_families: tuple[str, ...]

    def get(self, cf: str, key: bytes) -> bytes | None: ...

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """``get`` of each key, in order, in one call (RocksDB's MultiGet: one read of a batch of
        point lookups, no iterator per key)."""
        ...

    def scan(
        self, cf: str, *, lower: bytes | None = None, upper: bytes | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """Items with lower <= key < upper in key order, at most ``limit`` of them."""
        ...

    def iterate(
        self, cf: str, *, lower: bytes | None = None, upper: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Like scan, streamed; for long reads (exports, counts) away from the event loop."""
        ...

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        """Apply ``ops`` atomically, in order. ``sync`` waits for the WAL to reach the disk.
        ``no_slowdown``: where the store would make the write wait (a RocksDB write stall), raise
        storage.errors.WriteStalledError instead, having written nothing."""
        ...

    def sync_wal(self) -> None:
        """Make every write applied so far durable (fsync of the write-ahead log)."""
        ...

    def compact(self, cf: str, begin: bytes | None = None, end: bytes | None = None) -> None:
        """Rewrite [begin, end) dropping deleted entries (tombstones)."""
        ...

    def count(self, cf: str, *, stop: threading.Event | None = None) -> int:
        """Exact number of live keys (a full key scan); raises StorageError once ``stop`` is set."""
        ...

    def approximate_count(self, cf: str) -> int: ...

    def close(self) -> None: ...


def holds(kv: KV, ops: Sequence[Op]) -> bool:
    """Whether ``kv`` holds what ``ops`` leave: each key's last put, no key deleted last (ranges are not
    checked). After a failed write: whether it was applied all the same."""
    last: dict[tuple[str, bytes], bytes | None] = {}
    for op in ops:
        if isinstance(op, Put):
            last[(op.cf, op.key)] = op.value
        elif isinstance(op, Delete):
            last[(op.cf, op.key)] = None
    return all(kv.get(cf, key) == value for (cf, key), value in last.items())
