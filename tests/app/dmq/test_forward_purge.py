"""The sidecar's record of what it forwarded to Rock-DMQ (``dmq_forwarded``) is purged RETENTION_MS after
each due time, however its ids sort and however many expire. Before, every round scanned the first
PURGE_SCAN records from the first key, once an hour: records behind PURGE_SCAN live ones were never
purged, and at most PURGE_SCAN went an hour (the column family grew without bound past ~2.8 forwarded
messages a second)."""

from __future__ import annotations

from pathlib import Path

import orjson

from rocksidecar.app.dmq.forward import (
    COLUMN_FAMILIES,
    FORWARDED_CF,
    PURGE_EVERY_S,
    PURGE_SCAN,
    RETENTION_MS,
    Forwarder,
)
from rocksidecar.app.service import Service
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.memory import MemoryKV
from tests.app.conftest import settings_for
from tests.rmq.test_periodic import StepSleep

NOW = 10 * RETENTION_MS
LIVE_DUE = NOW + 30 * 86_400_000  # delayed a month ahead: kept
EXPIRED_DUE = NOW - 2 * RETENTION_MS


def record(key: bytes, due: int) -> Put:
    return Put(FORWARDED_CF, key, orjson.dumps({"topic": "t", "due": due}))


def forwarder(kv: MemoryKV, writer: GroupCommitWriter) -> Forwarder:
    return Forwarder(
        None, None, kv, writer,  # type: ignore[arg-type]  # the purge sends nothing
        policy_for=lambda _t: RetryPolicy((1.0,), 3), now_ms=lambda: NOW,
    )  # fmt: skip


def keys(kv: MemoryKV) -> list[bytes]:
    return [k for k, _ in kv.scan(FORWARDED_CF)]


async def test_a_round_reaches_expired_records_behind_live_ones() -> None:
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    try:
        # PURGE_SCAN records delayed far ahead sort first (a sidecar restarted with a lower id prefix, or
        # the month's wrap of the UNIQ_KEY's time field), one long expired after them
        live = [record(b"0%031d" % i, LIVE_DUE) for i in range(PURGE_SCAN)]
        await writer.write([*live, record(b"F" * 32, EXPIRED_DUE)])
        assert await forwarder(kv, writer).purge() == 1
        assert kv.get(FORWARDED_CF, b"F" * 32) is None
        assert len(keys(kv)) == PURGE_SCAN  # the live ones stay
    finally:
        await writer.close()


async def test_a_round_drops_more_than_one_chunk_of_expired_records() -> None:
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    try:
        expired = 3 * PURGE_SCAN + 7
        await writer.write([record(b"%032d" % i, EXPIRED_DUE) for i in range(expired)])
        assert await forwarder(kv, writer).purge() == expired
        assert keys(kv) == []
    finally:
        await writer.close()


async def test_a_round_out_of_budget_goes_on_next_round_where_it_stopped_and_wraps_at_the_end() -> None:
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    try:
        fwd = forwarder(kv, writer)
        await writer.write([record(b"k%d" % i, LIVE_DUE if i % 2 else EXPIRED_DUE) for i in range(10)])
        # 4 records a round, 3 a chunk: the first round reads k0..k3, the second k4..k7
        assert await fwd.purge(limit=3, round_limit=4) == 2  # k0, k2
        assert await fwd.purge(limit=3, round_limit=4) == 2  # k4, k6: not k0..k3 again
        assert keys(kv) == [b"k1", b"k3", b"k5", b"k7", b"k8", b"k9"]
        await writer.write([record(b"a", EXPIRED_DUE)])  # before the cursor: found after the wrap
        assert await fwd.purge(limit=3, round_limit=4) == 1  # k8, then the end: the round stops there
        assert kv.get(FORWARDED_CF, b"k8") is None and kv.get(FORWARDED_CF, b"a") is not None
        assert await fwd.purge(limit=3, round_limit=4) == 1  # from the first key again
        assert keys(kv) == [b"k1", b"k3", b"k5", b"k7", b"k9"]
    finally:
        await writer.close()


async def test_the_sidecar_in_service_mode_purges_the_forwarded_records_every_minute(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, delay_mode="service", dmq_inner_topic="dmq_purge_inner")
    service = Service(settings, namesrv=("127.0.0.1:1",))
    try:
        await service.writer.write([record(b"old", 1), record(b"new", 2**50)])
        sleep = StepSleep()
        (loop,) = [p for p in service.background_loops(sleep) if p.name == "dmq-forwarded-purge"]
        loop.start()
        await sleep.release()  # one interval, one round
        await loop.close()
        assert sleep.intervals[0] == PURGE_EVERY_S == 60.0
        assert service.kv.get(FORWARDED_CF, b"old") is None
        assert service.kv.get(FORWARDED_CF, b"new") is not None
    finally:
        await service.stop()
