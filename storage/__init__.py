"""Bytes-level storage shared by retry/ and delay/: the RocksDB handle and the group-commit writer."""

from rocksidecar.storage.clock import SteadyClock
from rocksidecar.storage.errors import StorageError, StoreLockedError
from rocksidecar.storage.group_commit import GroupCommitWriter, SyncStrategy
from rocksidecar.storage.kv import KV, Delete, DeleteRange, Op, Put
from rocksidecar.storage.memory import MemoryKV

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
