"""The retry backlog's oldest age (rocksidecar_retry_oldest_age_seconds) counts real time after the wall
clock was stepped back.

A failed send's first-failure time is stamped by the retry store's clock, which never runs backwards
(storage.clock.SteadyClock) and so leads the wall clock by a step back, for good. Its age was the wall
clock minus that stamp: a step back of an hour showed a half-hour-old backlog as 0 s old (and an hour
younger than it is until the store's clock and the wall clock met again). It is counted on the store's
own clock (SidecarParts._store_stats).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rocksidecar.app import assembly
from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay.store import DelayStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock

HOUR_MS = 3_600_000


async def test_retry_oldest_age_counts_real_time_after_a_backward_step() -> None:
    clock = FakeWallClock()
    kv = MemoryKV(tuple(dict.fromkeys((*RETRY_CFS, *DELAY_CFS))))
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer, now_ms=clock.now_ms, clock=clock.monotonic)
    delay = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    try:
        clock.step_wall(-HOUR_MS)  # NTP steps the wall clock back an hour
        failed_at = retry.now_ms()  # as Sidecar stamps a failed send (now_ms=self.retry.now_ms)
        rec = RetryRecord(id="M", topic="orders", body=b"x", first_failure_ms=failed_at)
        await retry.spool(rec, failed_at + 3_600_000)  # the broker stays down: waiting on its ladder
        clock.advance(1800.0)  # half an hour later
        parts = SimpleNamespace(retry=retry, delay=delay, disk_reserve=None)
        stats = assembly.SidecarParts._store_stats(parts)  # type: ignore[arg-type]
        assert stats["retry_oldest_age_seconds"] == pytest.approx(1800.0, abs=1.0)
    finally:
        await retry.close()
        await delay.close()
        await writer.close()
