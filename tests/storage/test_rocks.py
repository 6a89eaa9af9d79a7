"""RocksKV specifics: persistence across reopen, the directory lock, secondary views, error seams."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage import rocks
from storage.errors import StorageError, StoreLockedError
from storage.kv import Put
from storage.rocks import Access, RocksKV


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
