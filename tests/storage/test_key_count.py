"""KeyCount: no full key count on the critical path of opening a large store (issue 18)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay.store import DelayStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.keys import PENDING_CF
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.key_count import SYNC_COUNT_LIMIT, KeyCount
from rocksidecar.storage.kv import Put
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.rocks import RocksKV

LARGE = SYNC_COUNT_LIMIT * 100


class LargeKV(MemoryKV):
    """Estimates LARGE keys everywhere; its counts wait for ``release`` and report ``counted``."""

    def __init__(self, column_families: tuple[str, ...], counted: int = LARGE + 7) -> None:
        super().__init__(column_families)
        self.counted = counted
        self.release = threading.Event()
        self.counting_threads: list[threading.Thread] = []

    def approximate_count(self, cf: str) -> int:
        return LARGE

    def count(self, cf: str, *, stop: threading.Event | None = None) -> int:
        self.counting_threads.append(threading.current_thread())
        while not self.release.wait(0.01):
            if stop is not None and stop.is_set():
                raise StorageError("count stopped")
        return self.counted


def test_a_large_column_family_is_counted_off_the_calling_thread() -> None:
    kv = LargeKV((PENDING_CF,))
    count = KeyCount(kv, PENDING_CF)
    try:
        assert threading.current_thread() not in kv.counting_threads
        assert count.value == LARGE and not count.exact  # the estimate, at once
        count.add(5)
        count.add(-2)
        assert count.value == LARGE + 3
        kv.release.set()
        assert count.wait(10)
        assert count.exact and count.value == LARGE + 7 + 3  # the count plus the changes meanwhile
    finally:
        count.close()


def test_a_small_column_family_is_counted_exactly_at_once() -> None:
    kv = MemoryKV((PENDING_CF,))
    kv.write([Put(PENDING_CF, b"%d" % i, b"") for i in range(3)], sync=True)
    count = KeyCount(kv, PENDING_CF)
    assert count.exact and count.value == 3


def test_close_stops_a_count_in_progress_and_keeps_the_estimate() -> None:
    kv = LargeKV((PENDING_CF,))
    count = KeyCount(kv, PENDING_CF)
    count.close()  # would hang if the count ignored its stop event: it is never released
    assert not count.exact and count.value == LARGE


async def test_opening_large_stores_does_not_count_on_the_event_loop() -> None:
    kv = LargeKV(tuple(dict.fromkeys((*RETRY_CFS, *DELAY_CFS))), counted=42)
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer)
    delay = DelayStore(kv, writer)
    try:
        assert threading.current_thread() not in kv.counting_threads
        # the retry store's pending count is two column families' (pending, and waiting: retry.lanes)
        assert retry.pending_count == 2 * LARGE and retry.dead_count == delay.pending_count == LARGE
        kv.release.set()
        assert retry.wait_counted(10) and delay.wait_counted(10)
        assert retry.pending_count == 2 * 42 and retry.dead_count == delay.pending_count == 42
    finally:
        await retry.close()
        await delay.close()
        await writer.close()


def test_rocks_count_stops_when_asked(tmp_path: Path) -> None:
    kv = RocksKV.open(tmp_path / "db", (PENDING_CF,))
    try:
        kv.write([Put(PENDING_CF, b"%05d" % i, b"") for i in range(10)], sync=True)
        assert kv.count(PENDING_CF, stop=threading.Event()) == 10
        stopped = threading.Event()
        stopped.set()
        with pytest.raises(StorageError, match="stopped"):
            kv.count(PENDING_CF, stop=stopped)
    finally:
        kv.close()
