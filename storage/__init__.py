"""Bytes-level storage shared by retry/ and delay/: the RocksDB handle and the group-commit writer."""

from .clock import SteadyClock
from .errors import StorageError, StoreLockedError
from .group_commit import GroupCommitWriter, SyncStrategy
from .kv import KV, Delete, DeleteRange, Op, Put
from .memory import MemoryKV

__all__ = [
    "KV",
    "Delete",
    "DeleteRange",
    "GroupCommitWriter",
    "MemoryKV",
    "Op",
    "Put",
    "SteadyClock",
    "StorageError",
    "StoreLockedError",
    "SyncStrategy",
]
