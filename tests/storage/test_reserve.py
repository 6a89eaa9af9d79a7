"""DiskReserve and the group-commit writer in drain mode (issue 11 item 4), with injected free space and
clock: a write that fails for lack of space releases the reserve and refuses new work (batches that only
add), while acks, reschedules, dead-lettering and bookkeeping still write; new work is accepted again,
and the reserve re-created, once twice the reserve is free. The real disk is in test_disk_full.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocksidecar.storage import reserve as reserve_module
from rocksidecar.storage import rocks
from rocksidecar.storage.errors import StorageError, WriteStalledError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Delete, Op, Put
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.reserve import MIB, DiskFullError, DiskReserve, ReserveFile
from rocksidecar.storage.rocks import RocksKV
from tests.fakes import FakeClock
from tests.tmpfs import small_disk

SIZE = 2 * MIB


class FullDisk:
    """A KV whose writes fail with ENOSPC (what RocksDB raises) while ``full`` is set and the reserve
    still takes the last room."""

    def __init__(self, reserve: ReserveFile | None = None) -> None:
        self.inner = MemoryKV(["pending", "meta", "dead"])
        self.column_families = self.inner.column_families
        self._full = False
        self._reserve = reserve
        self.writes: list[Sequence[Op]] = []

    @property
    def full(self) -> bool:
        return self._full and (self._reserve is None or self._reserve.path.exists())

    @full.setter
    def full(self, value: bool) -> None:
        self._full = value

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self.inner.get(cf, key)

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        if self.full:
            raise StorageError("write: IO error: No space left on device: While appending to file")
        self.writes.append(ops)
        self.inner.write(ops, sync=sync)

    def sync_wal(self) -> None:
        if self.full:
            raise StorageError("sync: IO error: No space left on device")


class StalledDisk(FullDisk):
    """A KV like RocksDB once its flush failed for lack of space: its writes stop ("Stopping writes
    because we have 2 immutable memtables") while ``stalled`` is set and the reserve still takes the
    room the flush needs. A write that may wait waits on the event loop until space is freed, and nothing
    frees any: this one fails the test at once instead of hanging it. ``no_slowdown`` of every write is
    kept."""

    def __init__(self, reserve: ReserveFile) -> None:
        super().__init__(reserve)
        self.stalled = False
        self.no_slowdown: list[bool] = []

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        self.no_slowdown.append(no_slowdown)
        if self.stalled and self.full_of_reserve():
            if not no_slowdown:
                raise AssertionError("the write waits for space nothing frees: the sidecar would freeze")
            raise WriteStalledError("write: Result incomplete: Write stall")
        super().write(ops, sync=sync, no_slowdown=no_slowdown)

    def full_of_reserve(self) -> bool:
        return self._reserve is not None and self._reserve.path.exists()


class Disk:
    def __init__(self, tmp_path: Path) -> None:
        self.free = 10 * MIB
        self.clock = FakeClock()
        self.file = ReserveFile(tmp_path / "reserve", SIZE)
        self.reserve = DiskReserve(self.file, ["meta"], free=lambda: self.free, clock=self.clock)


@pytest.fixture
def disk(tmp_path: Path) -> Disk:
    return Disk(tmp_path)


def spool(key: bytes) -> list[Op]:
    return [Put("pending", key, b"body"), Put("meta", b"clock", b"1")]


def test_the_reserve_is_created_at_start_only_when_twice_its_size_is_free(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    disk.free = 2 * SIZE - 1
    disk.reserve.start(None)
    assert not disk.file.path.exists()
    assert "no room for the 2 MiB disk reserve" in caplog.text
    disk.free = 2 * SIZE
    disk.clock.advance(1)
    disk.reserve.check()  # a missing reserve is created once there is room
    assert disk.file.path.stat().st_size == SIZE and not disk.reserve.draining


def test_a_read_only_open_on_a_full_disk_starts_draining(disk: Disk) -> None:
    disk.reserve.start(None)
    assert disk.file.exists()
    disk.reserve.start("cannot open store: IO error: No space left on device")
    assert disk.reserve.draining and not disk.file.path.exists()


def test_admits_only_batches_that_drain(disk: Disk) -> None:
    disk.reserve.start(None)
    assert disk.reserve.admits(spool(b"k"))
    disk.reserve.enter("No space left on device")
    assert not disk.reserve.admits(spool(b"k"))  # new work
    assert disk.reserve.admits([Delete("pending", b"k")])  # an ack
    assert disk.reserve.admits([Put("pending", b"k2", b"v"), Delete("pending", b"k")])  # a reschedule
    assert disk.reserve.admits([Put("dead", b"d", b"v"), Delete("pending", b"k")])  # a dead letter
    assert disk.reserve.admits([Put("meta", b"floor", b"k")])  # the floor (the replay's probe)


async def test_a_full_disk_releases_the_reserve_refuses_new_work_and_keeps_draining(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    kv = FullDisk(disk.file)
    writer = GroupCommitWriter(kv, reserve=disk.reserve)  # type: ignore[arg-type]
    disk.reserve.start(None)
    for i in range(3):
        await writer.write(spool(b"k%d" % i))
    kv.full = True
    with caplog.at_level(logging.WARNING), pytest.raises(StorageError, match="No space left"):
        await writer.write(spool(b"k3"))
    assert disk.reserve.draining and not disk.file.path.exists()
    assert not kv.full  # the reserve's room: the store writes again
    disk.free = SIZE
    for _ in range(3):
        with pytest.raises(DiskFullError) as refused:
            await writer.write(spool(b"new"))
        assert isinstance(refused.value, StorageError)  # the APIs answer 503 with Retry-After
    await writer.write([Delete("pending", b"k0")])  # acks still write
    await writer.write([Put("meta", b"floor", b"k1")])
    assert writer.healthy and kv.get("pending", b"k0") is None and kv.get("pending", b"new") is None
    assert caplog.text.count("disk full: refusing new work") == 1  # each transition said once
    assert "in the 2 MiB released" in caplog.text

    disk.free = 2 * SIZE - 1  # above the reserve, not yet twice: still draining
    disk.clock.advance(5)
    with pytest.raises(DiskFullError):
        await writer.write(spool(b"new"))
    disk.free, kv.full = 2 * SIZE, False  # the operator made room
    with pytest.raises(DiskFullError):
        await writer.write(spool(b"new"))  # looked at most once a second
    disk.clock.advance(1)
    await writer.write(spool(b"new"))
    assert kv.get("pending", b"new") == b"body" and not disk.reserve.draining and disk.file.exists()
    assert caplog.text.count("accepting new work again") == 1
    await writer.close()


async def test_a_write_stalled_on_a_nearly_full_disk_fails_at_once_and_drains(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27: RocksDB's flush failed for lack of space and it stopped writes; a write waiting in that
    stall froze the sidecar, and as no write failed with ENOSPC the reserve was never released."""
    kv = StalledDisk(disk.file)
    writer = GroupCommitWriter(kv, reserve=disk.reserve)  # type: ignore[arg-type]
    disk.reserve.start(None)
    await writer.write(spool(b"k0"))
    assert kv.no_slowdown == [False]  # room on the disk: writes wait out stalls as they always did
    disk.free = SIZE - 1  # less than the reserve: no room for the flush
    disk.clock.advance(1)
    kv.stalled = True
    with pytest.raises(WriteStalledError, match="Write stall"):
        await writer.write(spool(b"k1"))
    assert kv.no_slowdown[-1] is True
    assert disk.reserve.draining and not disk.file.path.exists()  # the room the flush waits for
    assert "disk full: refusing new work" in caplog.text
    with pytest.raises(DiskFullError, match="no room to flush the store: a write stalled with 1 MiB free"):
        await writer.write(spool(b"new"))
    await writer.write([Delete("pending", b"k0")])  # acks still write, without waiting
    assert writer.healthy and kv.get("pending", b"k0") is None and kv.get("pending", b"k1") is None
    assert kv.no_slowdown[-1] is True
    await writer.close()


async def test_writes_wait_out_stalls_while_the_disk_has_room(disk: Disk) -> None:
    """no_slowdown only below twice the reserve free (looked at most every LOW_SPACE_CHECK_S), and a stall
    with more free than the reserve fails that write only: under load RocksDB paces writes, with room."""
    kv = StalledDisk(disk.file)
    writer = GroupCommitWriter(kv, reserve=disk.reserve)  # type: ignore[arg-type]
    disk.reserve.start(None)
    disk.free = 2 * SIZE
    await writer.write(spool(b"a"))
    disk.free = 2 * SIZE - 1
    await writer.write(spool(b"b"))  # not looked at again yet
    disk.clock.advance(1)
    await writer.write(spool(b"c"))
    assert kv.no_slowdown == [False, False, True]
    kv.stalled = True
    with pytest.raises(WriteStalledError):
        await writer.write(spool(b"d"))
    assert not disk.reserve.draining and disk.file.exists()
    kv.stalled = False
    await writer.write(spool(b"e"))
    assert writer.healthy and kv.get("pending", b"e") == b"body" and kv.get("pending", b"d") is None
    disk.free = 10 * MIB
    disk.clock.advance(1)
    await writer.write(spool(b"f"))
    assert kv.no_slowdown[-1] is False
    await writer.close()


async def test_new_work_queued_before_the_failure_cannot_take_the_room(disk: Disk) -> None:
    kv = FullDisk(disk.file)
    writer = GroupCommitWriter(kv, reserve=disk.reserve)  # type: ignore[arg-type]
    disk.reserve.start(None)
    kv.full = True
    first = asyncio.ensure_future(writer.write(spool(b"a")))
    await asyncio.sleep(0)  # the first batch is being written when the rest queue up behind it
    queued = [asyncio.ensure_future(writer.write(spool(b"q%d" % i))) for i in range(3)]
    ack = asyncio.ensure_future(writer.write([Delete("pending", b"a")]))
    with pytest.raises(StorageError, match="No space left"):
        await first
    for future in queued:
        with pytest.raises(DiskFullError):
            await future
    await ack
    assert all(op.cf != "pending" or type(op) is Delete for ops in kv.writes for op in ops)
    await writer.close()


async def test_without_a_reserve_the_writer_behaves_as_before(disk: Disk) -> None:
    kv = FullDisk()
    writer = GroupCommitWriter(kv)  # type: ignore[arg-type]
    kv.full = True
    with pytest.raises(StorageError, match="No space left"):
        await writer.write(spool(b"a"))
    kv.full = False
    await writer.write(spool(b"a"))
    assert kv.get("pending", b"a") == b"body"
    await writer.close()


def test_without_room_for_a_reserve_a_full_disk_does_not_drain_forever(
    disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    disk.free = SIZE  # too little for the reserve at start: nothing to release later either
    disk.reserve.start(None)
    for _ in range(3):
        disk.reserve.on_write_failed(StorageError("IO error: No space left on device"))
    assert not disk.reserve.draining  # new work is taken again as soon as the store writes again
    assert caplog.text.count("no disk reserve to release") == 1


def test_draining_flushes_the_store_once_half_the_reserve_is_used(tmp_path: Path) -> None:
    free = [10 * MIB]
    clock = FakeClock()
    flushes: list[float] = []
    reserve = DiskReserve(
        ReserveFile(tmp_path / "reserve", SIZE),
        [],
        free=lambda: free[0],
        clock=clock,
        relieve=lambda: flushes.append(clock.now),
    )
    reserve.start(None)
    reserve.enter("No space left on device")
    free[0] = SIZE  # the released reserve
    clock.advance(1)
    reserve.check()
    assert flushes == []  # more than half of it left: the acks' tombstones may wait for the memtable
    free[0] = SIZE // 2 - 1
    clock.advance(1)
    reserve.check()
    reserve.check()  # at most once a second
    assert flushes == [clock.now] and reserve.draining


BACKLOG = 400_000  # its acks' tombstones alone (~19 MB of WAL) outgrow a 16 MiB reserve


def pending_key(i: int) -> bytes:
    return b"%020d-key-of-a-pending-message" % i


async def test_a_large_backlog_drains_in_the_reserve_on_a_real_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the flush while draining, the WAL of the acks took the whole reserve: the drain stopped
    with ENOSPC part way (and the store could not even close)."""
    monkeypatch.setattr(rocks, "RECOVER_EVERY_S", 0.0)
    monkeypatch.setattr(reserve_module, "CHECK_EVERY_S", 0.0)
    with small_disk(tmp_path / "fs", 160) as disk:
        kv = RocksKV.open(disk.path / "db", ["p"])
        for i in range(0, BACKLOG, 10_000):
            kv.write([Put("p", pending_key(j), b"v" * 60) for j in range(i, i + 10_000)], sync=False)
        kv.flush("p")
        reserve = DiskReserve(ReserveFile(disk.path / "reserve", 16 * MIB), [], relieve=lambda: kv.flush("p"))
        writer = GroupCommitWriter(kv, reserve=reserve)
        reserve.start(None)
        assert reserve.reserve.exists()
        disk.fill()
        with pytest.raises(StorageError, match="No space left"):
            for i in range(100):  # the WAL's last page may still take a few
                await writer.write([Put("p", b"new%d" % i, b"x" * 1000)])
        assert reserve.draining
        for i in range(0, BACKLOG, 1000):
            await writer.write([Delete("p", pending_key(j)) for j in range(i, i + 1000)])
        assert kv.scan("p", limit=1) == [] and reserve.draining  # drained; the disk is still full
        with pytest.raises(DiskFullError):
            await writer.write([Put("p", b"new", b"x")])
        await writer.close()
        kv.close()  # flushes: fails when the drain left no room


def test_the_store_write_buffer_fits_in_the_reserve_with_room_for_the_reopen() -> None:
    """Issue 27 item 6: a reopen in the released reserve flushes every unflushed byte (memtables, WAL)
    and writes its own files, so the write buffer is the reserve less rocks.MIN_FREE_BYTES, at most the
    64 MiB the store uses without a reserve; a reserve below 16 MiB leaves too little to drain in."""
    assert reserve_module.MIN_RESERVE_MB == 16
    assert reserve_module.store_write_buffer_bytes(0) == rocks.DB_WRITE_BUFFER_BYTES
    assert reserve_module.store_write_buffer_bytes(16) == 8 * MIB
    assert reserve_module.store_write_buffer_bytes(64) == 56 * MIB
    assert reserve_module.store_write_buffer_bytes(1024) == 64 * MIB
    for mb in (16, 17, 64, 72, 1024):
        assert reserve_module.store_write_buffer_bytes(mb) + rocks.MIN_FREE_BYTES <= mb * MIB
    for mb in (1, 8, 15):
        with pytest.raises(reserve_module.ReserveTooSmallError, match=f"{mb} MiB is too small.*needs 16 MiB"):
            reserve_module.store_write_buffer_bytes(mb)
