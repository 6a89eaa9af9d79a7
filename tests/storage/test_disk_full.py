"""RocksKV on a full disk (a real tmpfs): RocksDB refuses every write after a failed WAL append, even
once space is freed, so recover() reopens it; a store that cannot open read-write for lack of space
opens read-only (issue 11 items 3 and 4)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocksidecar.storage import rocks
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Delete, Put
from rocksidecar.storage.rocks import RocksKV
from tests.tmpfs import SmallDisk, small_disk


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    monkeypatch.setattr(rocks, "RECOVER_EVERY_S", 0.0)  # the rate limit is not under test here
    with small_disk(tmp_path / "fs", 24) as d:
        yield d


def fill_store(kv: RocksKV, n: int = 1000) -> None:
    for i in range(0, n, 100):
        kv.write([Put("a", b"k%05d" % j, b"x" * 1000) for j in range(i, i + 100)], sync=True)


def test_writes_fail_while_full_and_recover_reopens_once_space_is_freed(disk: SmallDisk) -> None:
    kv = RocksKV.open(disk.path / "db", ["a"])
    try:
        fill_store(kv)
        disk.fill()
        with pytest.raises(StorageError, match="No space left"):
            for i in range(1000):  # the WAL's last page may still take a few
                kv.write([Delete("a", b"k%05d" % i)], sync=True)
        with pytest.raises(StorageError, match="no space left"):
            kv.recover()  # nothing freed yet: the store is left as it is ...
        assert kv.get("a", b"k00999") == b"x" * 1000  # ... and still readable
        disk.free()
        with pytest.raises(StorageError):
            kv.write([Put("a", b"after", b"y")], sync=True)  # RocksDB stays read-only by itself
        kv.recover()
        kv.write([Put("a", b"after", b"y")], sync=True)
        assert kv.get("a", b"after") == b"y"
    finally:
        kv.close()


def test_open_on_a_full_disk_is_read_only_until_recovered(disk: SmallDisk) -> None:
    kv = RocksKV.open(disk.path / "db", ["a"])
    fill_store(kv, 300)
    kv.close()
    disk.fill()
    with pytest.raises(StorageError, match="No space left"):
        RocksKV.open(disk.path / "db", ["a"])
    kv = RocksKV.open(disk.path / "db", ["a"], read_only_when_full=True)
    try:
        assert kv.read_only_reason is not None and "No space left" in kv.read_only_reason
        assert len(kv.scan("a")) == 300  # what it holds is readable
        writer = GroupCommitWriter(kv)
        assert not writer.healthy and writer.last_error == kv.read_only_reason
        with pytest.raises(StorageError):
            kv.write([Put("a", b"new", b"y")], sync=True)
        disk.free()
        kv.recover()
        kv.write([Put("a", b"new", b"y")], sync=True)
        assert kv.read_only_reason is None and kv.get("a", b"new") == b"y"
    finally:
        kv.close()


async def test_the_group_commit_writer_recovers_the_store_without_a_restart(disk: SmallDisk) -> None:
    kv = RocksKV.open(disk.path / "db", ["a"])
    writer = GroupCommitWriter(kv)
    try:
        fill_store(kv, 300)
        disk.fill()
        with pytest.raises(StorageError):
            for i in range(300):
                await writer.write([Delete("a", b"k%05d" % i)])
        assert not writer.healthy
        with pytest.raises(StorageError):
            await writer.write([Put("a", b"still", b"full")])
        disk.free()
        await writer.write([Put("a", b"back", b"y")])  # reopened before the write
        assert writer.healthy and kv.get("a", b"back") == b"y"
    finally:
        await writer.close()
        kv.close()


def test_a_kept_failure_does_not_hold_the_store_after_close(disk: SmallDisk) -> None:
    """A store call's exception kept alive (pytest's log capture keeps every logged ``%s`` argument; a
    loop's ``failure``) must not keep the RocksDB handle, and so its LOCK, once the store is closed: a
    reopen in this process (a restart of the service in a test, the reserve's recovery) failed with
    "lock hold by current process" while the failed call's frame held a column family's handle."""
    kv = RocksKV.open(disk.path / "db", ["a"])
    fill_store(kv, 300)
    disk.fill()
    kept: list[StorageError] = []
    for call in (lambda: kv.flush("a"), lambda: kv.write([Put("a", b"more", b"x" * 4096)], sync=True)):
        try:
            for _ in range(1000):  # the WAL's last page may still take a few
                call()
        except StorageError as exc:
            kept.append(exc)
    assert len(kept) == 2 and all("No space left" in str(e) for e in kept), kept
    kv.close()
    disk.free()
    again = RocksKV.open(disk.path / "db", ["a"])  # at once: no collection, no wait needed
    try:
        assert len(again.scan("a")) == 300
    finally:
        again.close()


def test_a_close_that_cannot_flush_on_a_full_disk_loses_nothing_and_does_not_raise(
    disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping on a full disk (SIGTERM while the reserve drains): the close's flush of the memtables
    fails with ENOSPC though every write succeeded. What was written is in the synced WAL, so the stop
    goes on (a warning, not a StorageError out of Service.stop) and a reopen has every key."""
    kv = RocksKV.open(disk.path / "db", ["a"])
    fill_store(kv, 300)  # in the memtable and the WAL, not yet in an SST
    disk.fill()
    kv.close()
    assert any("No space left" in r.getMessage() for r in caplog.records if r.levelname == "WARNING"), (
        caplog.text
    )
    disk.free()
    again = RocksKV.open(disk.path / "db", ["a"])
    try:
        assert len(again.scan("a")) == 300
    finally:
        again.close()
