"""Bytes-level storage shared by retry/ and delay/: the RocksDB handle and the group-commit writer."""

from storage.clock import SteadyClock
from storage.errors import StorageError, StoreLockedError
from storage.group_commit import GroupCommitWriter, SyncStrategy
from storage.kv import KV, Delete, DeleteRange, Op, Put
from storage.memory import MemoryKV

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
