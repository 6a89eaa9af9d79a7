"""RocksKV specifics: persistence across reopen, the directory lock, secondary views, error seams."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Rdict, WriteOptions

from rocksidecar.storage import rocks
from rocksidecar.storage.errors import StorageError, StoreLockedError, WriteStalledError
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import Access, RocksKV
from rocksidecar.storage.rocks import _open_db as open_db


def test_synced_data_survives_reopen_and_new_column_families_are_created(tmp_path: Path) -> None:
    kv = RocksKV.open(tmp_path / "db", ["a"])
    kv.write([Put("a", b"k", b"v")], sync=True)
    kv.close()
    kv = RocksKV.open(tmp_path / "db", ["a", "b"])
    try:
        assert kv.get("a", b"k") == b"v"
        assert kv.scan("b") == []
    finally:
        kv.close()


def test_second_open_fails_with_store_locked(tmp_path: Path) -> None:
    kv = RocksKV.open(tmp_path / "db", ["a"])
    try:
        with pytest.raises(StoreLockedError) as info:
            RocksKV.open(tmp_path / "db", ["a"])
        assert isinstance(info.value.__cause__, Exception)  # raised ... from the rocksdict error
    finally:
        kv.close()
    RocksKV.open(tmp_path / "db", ["a"]).close()  # close released the lock


def test_a_reopen_waits_for_a_closed_handle_that_a_reference_cycle_still_holds(tmp_path: Path) -> None:
    """rocksdict keeps a closed DB's LOCK while any of its objects lives: a column family caught in a
    reference cycle (a traceback's frames) made a reopen in this process fail with "lock hold by current
    process ... No locks available" until the garbage collector ran (the disk-reserve test's flake)."""
    import gc

    kv = RocksKV.open(tmp_path / "db", ["a"])
    kv.write([Put("a", b"k", b"v")], sync=True)
    cycle: list[Any] = [kv._cfs["a"]]
    cycle.append(cycle)
    del cycle
    gc.disable()  # only open's own collection may free it
    try:
        kv.close()
        again = RocksKV.open(tmp_path / "db", ["a"])
    finally:
        gc.enable()
    try:
        assert again.get("a", b"k") == b"v"
    finally:
        again.close()


def test_secondary_reads_a_directory_held_by_a_writer(tmp_path: Path) -> None:
    kv = RocksKV.open(tmp_path / "db", ["a"])
    try:
        kv.write([Put("a", b"k1", b"v1")], sync=True)
        view = RocksKV.open(tmp_path / "db", ["a"], access=Access.SECONDARY, secondary_dir=tmp_path / "s")
        try:
            assert view.get("a", b"k1") == b"v1"
            kv.write([Put("a", b"k2", b"v2")], sync=True)
            view.catch_up()
            assert [k for k, _ in view.scan("a")] == [b"k1", b"k2"]
        finally:
            view.close()
    finally:
        kv.close()


class StoppedDB:
    """In place of the Rdict of a RocksDB that stopped writes: what it answers a no_slowdown write
    (Status::Incomplete, its text checked against RocksDB 8 with a write stall made by an L0 stop
    trigger of 1); a write without no_slowdown would wait, which fails the test instead."""

    def __init__(self) -> None:
        self.options: list[tuple[bool, bool]] = []

    def write(self, batch: object, options: WriteOptions) -> None:
        self.options.append((options.sync, options.no_slowdown))
        if not options.no_slowdown:
            raise AssertionError("the write would wait for the stall to end")
        raise Exception("Result incomplete: Write stall")


def test_a_no_slowdown_write_in_a_stall_fails_at_once_and_needs_no_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kv = RocksKV.open(tmp_path / "db", ["a"])
    try:
        kv.write([Put("a", b"k", b"v")], sync=True, no_slowdown=True)  # no stall: written
        db, stopped = kv._db, StoppedDB()
        monkeypatch.setattr(kv, "_db", stopped)
        for sync in (False, True):
            with pytest.raises(WriteStalledError, match=r"^write: Result incomplete: Write stall$"):
                kv.write([Put("a", b"k2", b"v")], sync=sync, no_slowdown=True)
        assert stopped.options == [(False, True), (True, True)]
        monkeypatch.setattr(kv, "_db", db)
        reopens: list[object] = []

        def counted_open(*args: Any) -> Rdict:
            reopens.append(args)
            return open_db(*args)

        monkeypatch.setattr(rocks, "_open_db", counted_open)
        kv.recover()  # refused before the WAL: the store is intact, unlike after a failed write
        assert reopens == []
        kv.write([Put("a", b"k3", b"v")], sync=True)
        assert kv.get("a", b"k") == b"v" and kv.get("a", b"k2") is None and kv.get("a", b"k3") == b"v"
    finally:
        kv.close()


def test_open_errors_are_translated(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StorageError):
        RocksKV.open(tmp_path / "file" / "db", ["a"])
    with pytest.raises(StorageError):
        RocksKV.open(tmp_path / "missing", ["a"], access=Access.READ_ONLY)


def test_column_families_of_other_stores_in_the_directory_are_opened_too(tmp_path: Path) -> None:
    kv = RocksKV.open(tmp_path / "db", ["retry", "idem"])
    kv.write([Put("idem", b"k", b"v")], sync=True)
    kv.close()
    kv = RocksKV.open(tmp_path / "db", ["retry"])  # RocksDB refuses to open a subset
    try:
        assert set(kv.column_families) == {"retry", "idem"}
        assert kv.get("idem", b"k") == b"v"
    finally:
        kv.close()


def open_fds_under(path: Path) -> int:
    fds = Path("/proc/self/fd")
    if not fds.exists():
        pytest.skip("needs /proc to count open file descriptors")
    count = 0
    for fd in fds.iterdir():
        try:
            count += str(path) in os.readlink(fd)
        except OSError:
            continue  # closed while we looked
    return count


def test_files_and_descriptors_do_not_grow_across_restarts(tmp_path: Path) -> None:
    """Issue 11 item 11: every open flushed the WAL into one new small SST per column family, RocksDB
    moved them down unmerged, and each stayed open: descriptors grew with every restart."""
    path = tmp_path / "db"
    held: list[int] = []
    for restart in range(3 * rocks.MAX_FILES_PER_CF):
        kv = RocksKV.open(path, ["a", "b", "c"])
        try:
            for cf in ("a", "b", "c"):
                kv.write(
                    [Put(cf, b"%s%04d-%d" % (cf.encode(), restart, i), b"v" * 50) for i in range(20)],
                    sync=True,
                )
            held.append(open_fds_under(path))
            assert all(kv.sst_files(cf) <= rocks.MAX_FILES_PER_CF for cf in ("a", "b", "c"))
        finally:
            kv.close()
    assert max(held) <= held[0] + 3 * rocks.MAX_FILES_PER_CF, held
    kv = RocksKV.open(path, ["a", "b", "c"])
    try:
        assert len(kv.scan("b")) == 20 * 3 * rocks.MAX_FILES_PER_CF  # nothing lost by the merges
    finally:
        kv.close()


def test_index_and_filter_blocks_live_in_the_bounded_cache(tmp_path: Path) -> None:
    """Issue 18: with RocksDB's defaults each open SST keeps its whole index on the heap, so RSS grows
    with the number of stored messages; every column family must put index and (bloom) filter blocks
    into the one bounded block cache, partitioned, and compress with LZ4 (what RocksDB wrote to its
    OPTIONS file is what it runs with)."""
    kv = RocksKV.open(tmp_path / "db", ("a", "b"))
    kv.close()
    options = max((tmp_path / "db").glob("OPTIONS-*")).read_text()
    tables = [t for t in options.split("[TableOptions/BlockBasedTable ")[1:] if not t.startswith('"default"')]
    assert len(tables) == 2  # a, b (the unused default column family keeps RocksDB's defaults)
    for section in tables:
        assert "cache_index_and_filter_blocks=true" in section
        assert "index_type=kTwoLevelIndexSearch" in section
        assert "partition_filters=true" in section
        assert "bloomfilter" in section.lower()
    column_families = [c for c in options.split("[CFOptions ")[1:] if not c.startswith('"default"')]
    assert len(column_families) == 2
    assert all("\n  compression=kLZ4Compression" in cf for cf in column_families)


def test_open_does_not_rewrite_a_large_column_family_at_its_natural_file_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 18: 10 M pending take ~50 files of TARGET_FILE_BYTES after any compaction; counting them
    against MAX_FILES_PER_CF made every open compact the whole column family (gigabytes). Scaled down:
    files of 64 KiB, so a few MB of data needs dozens of them."""
    monkeypatch.setattr(rocks, "TARGET_FILE_BYTES", 64 * 1024)
    monkeypatch.setattr(rocks, "SMALL_CF_BYTES", 64 * 1024)
    path = tmp_path / "db"
    kv = RocksKV.open(path, ["big"])
    try:
        for start in range(0, 20_000, 1_000):
            kv.write(
                [Put("big", b"%08d" % i, os.urandom(200)) for i in range(start, start + 1_000)], sync=False
            )
        kv.compact("big")
        files = kv.sst_files("big")
    finally:
        kv.close()
    assert files > 2 * rocks.MAX_FILES_PER_CF  # the scaled-down store has many full-size files
    compacted: list[str] = []
    monkeypatch.setattr(RocksKV, "compact", lambda self, cf, begin=None, end=None: compacted.append(cf))
    RocksKV.open(path, ["big"]).close()
    assert compacted == []
