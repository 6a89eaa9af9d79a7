"""GroupCommitWriter: batching, durability before acknowledgement, failure propagation, health."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter, SyncStrategy
from rocksidecar.storage.kv import KV, Op, Put
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FaultyKV

STRATEGIES = list(SyncStrategy)


class GatedKV(FaultyKV):
    """Blocks every WAL sync until the test opens the gate, to see who waits for the sync."""

    def __init__(self, inner: KV) -> None:
        super().__init__(inner)
        self.gate = threading.Event()
        self.batch_sizes: list[int] = []

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        self.batch_sizes.append(len(ops))
        super().write(ops, sync=sync, no_slowdown=no_slowdown)

    def sync_wal(self) -> None:
        assert self.gate.wait(10), "test never opened the gate"
        super().sync_wal()


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_concurrent_writers_share_batches_and_all_land(kv: KV, strategy: SyncStrategy) -> None:
    writer = GroupCommitWriter(kv, strategy=strategy)
    await asyncio.gather(*(writer.write([Put("alpha", b"k%04d" % i, b"v")]) for i in range(500)))
    assert kv.count("alpha") == 500
    assert writer.batches < 500  # callers were gathered
    assert writer.ops_written == 500
    assert writer.healthy
    await writer.close()


async def test_caller_returns_only_after_the_sync() -> None:
    kv = GatedKV(MemoryKV(["alpha"]))
    writer = GroupCommitWriter(kv)
    task = asyncio.create_task(writer.write([Put("alpha", b"k", b"v")]))
    for _ in range(20):
        await asyncio.sleep(0)
    assert kv.writes == 1  # applied ...
    assert not task.done()  # ... but not acknowledged: the sync has not returned
    kv.gate.set()
    await asyncio.wait_for(task, 5)
    assert kv.syncs == 1
    await writer.close()


async def test_writes_queued_during_a_sync_form_the_next_batch() -> None:
    kv = GatedKV(MemoryKV(["alpha"]))
    writer = GroupCommitWriter(kv)
    first = asyncio.create_task(writer.write([Put("alpha", b"first", b"v")]))
    for _ in range(5):
        await asyncio.sleep(0)
    rest = [asyncio.create_task(writer.write([Put("alpha", b"r%d" % i, b"v")])) for i in range(50)]
    await asyncio.sleep(0)
    kv.gate.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), 5)
    assert kv.batch_sizes == [1, 50]
    await writer.close()


async def test_max_batch_ops_bounds_one_batch() -> None:
    kv = GatedKV(MemoryKV(["alpha"]))
    kv.gate.set()
    writer = GroupCommitWriter(kv, max_batch_ops=10)
    await asyncio.gather(*(writer.write([Put("alpha", b"k%d" % i, b"v")] * 3) for i in range(10)))
    assert max(kv.batch_sizes) <= 10
    assert sum(kv.batch_sizes) == 30
    await writer.close()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("fault", ["write", "sync"])
async def test_a_failed_batch_fails_every_caller_and_marks_unhealthy(
    kv: KV, strategy: SyncStrategy, fault: str
) -> None:
    faulty = FaultyKV(kv)
    writer = GroupCommitWriter(faulty, strategy=strategy)
    await writer.write([Put("alpha", b"before", b"v")])
    setattr(faulty, f"{fault}_fault", "IO error: No space left on device")
    results = await asyncio.gather(
        *(writer.write([Put("alpha", b"k%d" % i, b"v")]) for i in range(20)), return_exceptions=True
    )
    assert all(isinstance(r, StorageError) for r in results)
    assert not writer.healthy
    assert "No space left on device" in (writer.last_error or "")
    # recovery: the next batch that is written and synced makes the writer healthy again
    setattr(faulty, f"{fault}_fault", None)
    await writer.write([Put("alpha", b"after", b"v")])
    assert writer.healthy
    assert kv.get("alpha", b"after") == b"v"
    await writer.close()


async def test_unexpected_exceptions_become_storage_errors() -> None:
    class Broken(FaultyKV):
        def sync_wal(self) -> None:
            raise OSError(5, "Input/output error")

    writer = GroupCommitWriter(Broken(MemoryKV(["alpha"])))
    with pytest.raises(StorageError) as info:
        await writer.write([Put("alpha", b"k", b"v")])
    assert isinstance(info.value.__cause__, OSError)
    assert not writer.healthy
    await writer.close()


async def test_close_finishes_queued_writes_then_refuses_new_ones() -> None:
    kv = MemoryKV(["alpha"])
    writer = GroupCommitWriter(kv)
    tasks = [asyncio.create_task(writer.write([Put("alpha", b"k%d" % i, b"v")])) for i in range(10)]
    await asyncio.sleep(0)
    await writer.close()
    await asyncio.gather(*tasks)
    assert kv.count("alpha") == 10
    with pytest.raises(StorageError):
        await writer.write([Put("alpha", b"late", b"v")])


async def _turns(n: int = 20) -> None:
    """Let the writer's task run ``n`` turns of the loop (it makes progress in each, or waits)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_lazy_write_rides_on_the_next_synced_write() -> None:
    kv = GatedKV(MemoryKV(["alpha"]))
    kv.gate.set()
    writer = GroupCommitWriter(kv, ride_s=60.0)  # it would sync alone only after a minute
    lazy = asyncio.create_task(writer.write([Put("alpha", b"drop", b"v")] * 3, lazy=True))
    await _turns()
    assert kv.get("alpha", b"drop") == b"v" and kv.syncs == 0  # applied, no sync of its own ...
    assert not lazy.done()  # ... and not acknowledged before one
    await asyncio.wait_for(writer.write([Put("alpha", b"record", b"v")]), 5)
    await asyncio.wait_for(lazy, 5)  # the record's sync covered it
    assert kv.syncs == 1 and writer.batches == 1 and writer.ops_written == 4
    await writer.close()


async def test_a_lazy_write_with_nothing_to_ride_on_syncs_alone() -> None:
    kv = GatedKV(MemoryKV(["alpha"]))
    kv.gate.set()
    writer = GroupCommitWriter(kv, ride_s=0.0)
    await asyncio.wait_for(writer.write([Put("alpha", b"drop", b"v")], lazy=True), 5)
    assert kv.syncs == 1 and kv.get("alpha", b"drop") == b"v"
    await writer.close()


async def test_ordinary_writes_go_before_lazy_ones_queued_earlier() -> None:
    kv = GatedKV(MemoryKV(["alpha"]))
    writer = GroupCommitWriter(kv, ride_s=0.0)
    first = asyncio.create_task(writer.write([Put("alpha", b"first", b"v")]))
    await _turns(5)  # its sync is held at the gate
    lazy = asyncio.create_task(writer.write([Put("alpha", b"drop%d" % i, b"v") for i in range(3)], lazy=True))
    await asyncio.sleep(0)
    record = asyncio.create_task(writer.write([Put("alpha", b"record", b"v")] * 2))
    await asyncio.sleep(0)
    kv.gate.set()
    await asyncio.wait_for(asyncio.gather(first, lazy, record), 5)
    assert kv.batch_sizes == [1, 2, 3]  # the record queued after the drops was written before them ...
    assert kv.syncs == 2  # ... and they rode on its sync (alone, they would sync at once: ride_s 0)
    await writer.close()


async def test_close_syncs_the_lazy_writes_waiting_to_ride() -> None:
    kv = GatedKV(MemoryKV(["alpha"]))
    kv.gate.set()
    writer = GroupCommitWriter(kv, ride_s=60.0)
    lazy = asyncio.create_task(writer.write([Put("alpha", b"drop", b"v")], lazy=True))
    await _turns()
    await asyncio.wait_for(writer.close(), 5)
    await asyncio.wait_for(lazy, 5)
    assert kv.syncs == 1


async def test_a_failed_sync_fails_the_lazy_writes_that_rode_on_it() -> None:
    faulty = FaultyKV(MemoryKV(["alpha"]))
    writer = GroupCommitWriter(faulty, ride_s=60.0)
    lazy = asyncio.create_task(writer.write([Put("alpha", b"drop", b"v")], lazy=True))
    await _turns()
    faulty.sync_fault = "IO error: No space left on device"
    with pytest.raises(StorageError):
        await writer.write([Put("alpha", b"record", b"v")])
    with pytest.raises(StorageError):
        await asyncio.wait_for(lazy, 5)  # not known durable: its caller must not count it done
    assert not writer.healthy
    await writer.close()


async def test_a_lazy_write_failing_inside_an_ordinary_batch_fails_that_batch_too() -> None:
    class FailsDrops(GatedKV):
        def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
            if any(op.key == b"drop" for op in ops):
                raise StorageError("IO error: No space left on device")
            super().write(ops, sync=sync, no_slowdown=no_slowdown)

    kv = FailsDrops(MemoryKV(["alpha"]))
    writer = GroupCommitWriter(kv, ride_s=60.0)
    first = asyncio.create_task(writer.write([Put("alpha", b"first", b"v")]))
    await _turns(5)  # its sync is held at the gate
    lazy = asyncio.create_task(writer.write([Put("alpha", b"drop", b"v")], lazy=True))
    record = asyncio.create_task(writer.write([Put("alpha", b"record", b"v")]))
    await asyncio.sleep(0)
    kv.gate.set()
    await asyncio.wait_for(first, 5)
    for task in (lazy, record):  # the drop failed before the record's sync: not acknowledged either
        with pytest.raises(StorageError):
            await asyncio.wait_for(task, 5)
    assert not writer.healthy and kv.syncs == 1
    await writer.close()


CHILD = textwrap.dedent(
    """
    import asyncio, resource, signal, sys
    from rocksidecar.storage.rocks import RocksKV
    from rocksidecar.storage import GroupCommitWriter, Put, StorageError

    kv = RocksKV.open(sys.argv[1], ["a"])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so an oversized write fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    async def main():
        writer = GroupCommitWriter(kv)
        acked = 0
        try:
            while True:
                await writer.write([Put("a", b"k%09d" % acked, b"x" * 256)])
                acked += 1
        except StorageError as exc:
            print(acked, writer.healthy, exc, sep="|")
        await writer.close()

    asyncio.run(main())
    """
)


def test_a_real_io_error_from_rocksdb_fails_the_write(tmp_path: Path) -> None:
    """The file-size limit makes RocksDB's WAL append fail for real (EFBIG), as a full disk would."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "db")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    acked, healthy, error = out.stdout.strip().split("|")
    assert int(acked) > 100
    assert healthy == "False"
    assert "File too large" in error
    # everything acknowledged before the failure is in the store
    from rocksidecar.storage.rocks import RocksKV

    kv = RocksKV.open(tmp_path / "db", ["a"])
    try:
        assert kv.count("a") >= int(acked)
    finally:
        kv.close()
