"""Storage errors: every failure of the local store surfaces as one of these.

StorageError              the store failed (I/O error, disk full, corrupt file, closed handle)
└── StoreLockedError      another process (or handle) holds the RocksDB LOCK of the directory
"""

from __future__ import annotations


class StorageError(Exception):
    """A read or write of the local store failed; nothing that raised this was made durable."""


class StoreLockedError(StorageError):
    """The store directory is open in another process (RocksDB allows one writer per directory)."""
