"""Bytes-level storage shared by retry/ and delay/: the RocksDB handle and the group-commit writer."""
