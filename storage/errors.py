"""Storage errors: every failure of the local store surfaces as one of these.

StorageError              the store failed (I/O error, disk full, corrupt file, closed handle)
├── StoreLockedError      another process (or handle) holds the RocksDB LOCK of the directory
├── WriteStalledError     a write asked not to wait met a RocksDB write stall (nothing written)
└── UnsyncedError         a batch was applied but its WAL sync failed (in the store, not durable)
"""

from __future__ import annotations


class StorageError(Exception):
    """A read or write of the local store failed; nothing that raised this was made durable (though a
    write that raised UnsyncedError is in the store all the same)."""


class StoreLockedError(StorageError):
    """The store directory is open in another process (RocksDB allows one writer per directory)."""


class WriteStalledError(StorageError):
    """RocksDB stopped or slowed writes (memtables not yet flushed, too many L0 files) and the write,
    made with ``no_slowdown``, was refused before reaching the WAL instead of waiting."""


class UnsyncedError(StorageError):
    """The group-commit writer applied the batch, then its WAL sync failed (storage.group_commit): not
    durable, so its callers must not acknowledge it, but the store holds it (readable, replayed from the WAL
    on reopen). What counts the store's keys follows what the store holds and counts it as written."""
