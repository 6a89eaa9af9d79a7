"""Sizes the RocksDB store works within, shared by storage.rocks and storage.reserve: here, so that the
reserve (imported with the stores) does not load rocksdict before a store is opened."""

# The same bound caps each column family's memtable and the WAL (a rarely written column family pins old
# WAL files until it is flushed): it bounds the data not yet in SST files, which a reopen flushes before
# it deletes the WAL (storage.reserve sizes it to fit in the disk reserve).
DB_WRITE_BUFFER_BYTES = 64 * 1024 * 1024

# A store whose writes failed (RocksDB stays read-only after a failed WAL append, even once space is
# freed) is reopened only when this much is free: opening writes a new MANIFEST and WAL.
MIN_FREE_BYTES = 8 * 1024 * 1024
