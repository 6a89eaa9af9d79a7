"""The idempotency store's answers are purged soon after the window, however many distinct
Idempotency-Keys clients send. Before, a purge ran once an hour and dropped at most 10 000 answers: keys
arriving faster than 2.8 a second left the excess on disk for ever."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from rocksidecar.app.idempotency import (
    CF_ANSWERS,
    CF_EXPIRY,
    COLUMN_FAMILIES,
    PURGE_CHUNK,
    PURGE_EVERY_S,
    Answer,
    IdempotencyStore,
)
from rocksidecar.app.service import Service
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.memory import MemoryKV
from tests.app.conftest import settings_for
from tests.fakes import FakeWallClock
from tests.rmq.test_periodic import StepSleep

WINDOW_S = 2 * PURGE_EVERY_S


async def sent() -> Answer:
    return 200, {"id": "x", "status": "SENT"}


async def answer_keys(store: IdempotencyStore, keys: list[str]) -> None:
    for start in range(0, len(keys), 1000):
        await asyncio.gather(*(store.run(k, "fp", sent) for k in keys[start : start + 1000]))


def created(kv: MemoryKV) -> list[int]:
    return [orjson.loads(raw)["created_ms"] for _, raw in kv.iterate(CF_ANSWERS)]


def stored(key: bytes, created_ms: int) -> list[Put]:
    """An answer as IdempotencyStore keeps it, with its expiry index entry."""
    doc = orjson.dumps({"fp": "fp", "created_ms": created_ms, "status": 200, "body": {"id": "x"}})
    return [Put(CF_ANSWERS, key, doc), Put(CF_EXPIRY, b"%013d" % created_ms + key, b"")]


async def test_keys_arriving_faster_than_one_old_round_do_not_pile_up() -> None:
    clock = FakeWallClock()
    kv = MemoryKV(list(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    store = IdempotencyStore(kv, writer, window_s=WINDOW_S, now_ms=clock.now_ms)
    per_round = 10_500  # 175 keys a second, more than the 10 000 a round the old purge dropped
    try:
        for tick in range(4):
            await answer_keys(store, [f"client-key-{tick}-{i}" for i in range(per_round)])
            clock.advance(PURGE_EVERY_S)  # one tick of the service's idempotency-purge loop
            await store.purge()
            cutoff = clock.now_ms() - WINDOW_S * 1000
            assert [c for c in created(kv) if c < cutoff] == [], f"expired answers left after tick {tick}"
            # what the window holds, no more: two ticks of keys, and as many index entries
            assert kv.count(CF_ANSWERS) == kv.count(CF_EXPIRY) <= 2 * per_round
    finally:
        await writer.close()


async def test_a_round_goes_on_past_one_chunk_and_stops_at_the_first_answer_in_the_window() -> None:
    clock = FakeWallClock()
    kv = MemoryKV(list(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    store = IdempotencyStore(kv, writer, window_s=WINDOW_S, now_ms=clock.now_ms)
    try:
        old = 10 * PURGE_CHUNK + 7
        await writer.write([op for i in range(old) for op in stored(b"old-%d" % i, clock.now_ms() - i)])
        fresh = clock.now_ms() + WINDOW_S * 1000  # answered later: still in the window when purged
        await writer.write([op for i in range(5) for op in stored(b"new-%d" % i, fresh)])
        clock.advance(2 * WINDOW_S)
        assert await store.purge() == old
        assert created(kv) == [fresh] * 5
        assert kv.count(CF_EXPIRY) == 5
    finally:
        await writer.close()


async def test_a_round_out_of_budget_leaves_the_rest_to_the_next_round() -> None:
    clock = FakeWallClock()
    kv = MemoryKV(list(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    store = IdempotencyStore(kv, writer, window_s=WINDOW_S, now_ms=clock.now_ms)
    try:
        await writer.write([op for i in range(10) for op in stored(b"k%d" % i, clock.now_ms() + i)])
        clock.advance(2 * WINDOW_S)
        # 7 entries a round, 3 a chunk: the oldest first, the next round goes on from the oldest left
        assert await store.purge(limit=3, round_limit=7) == 7
        assert [k for k, _ in kv.scan(CF_ANSWERS)] == [b"k7", b"k8", b"k9"]
        assert await store.purge(limit=3, round_limit=7) == 3
        assert kv.count(CF_ANSWERS) == kv.count(CF_EXPIRY) == 0
        assert await store.purge(limit=3, round_limit=7) == 0
    finally:
        await writer.close()


async def test_a_newer_answer_under_the_same_key_outlives_the_old_index_entry() -> None:
    clock = FakeWallClock()
    kv = MemoryKV(list(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    store = IdempotencyStore(kv, writer, window_s=WINDOW_S, now_ms=clock.now_ms)
    try:
        await answer_keys(store, ["k"])
        clock.advance(WINDOW_S + 1)  # the first answer expired: the same key is answered anew
        await answer_keys(store, ["k"])
        assert kv.count(CF_EXPIRY) == 2
        assert await store.purge() == 1  # the first answer's index entry only
        assert created(kv) == [clock.now_ms()]
        assert kv.count(CF_EXPIRY) == 1
    finally:
        await writer.close()


async def test_the_sidecar_purges_expired_answers_every_minute(tmp_path: Path) -> None:
    service = Service(settings_for(tmp_path), namesrv=("127.0.0.1:1",))
    try:
        await service.writer.write([*stored(b"old", 1), *stored(b"new", 2**42)])
        sleep = StepSleep()
        (loop,) = [p for p in service.background_loops(sleep) if p.name == "idempotency-purge"]
        loop.start()
        await sleep.release()  # one interval, one round
        await loop.close()
        assert sleep.intervals[0] == PURGE_EVERY_S == 60.0
        assert service.kv.get(CF_ANSWERS, b"old") is None
        assert service.kv.get(CF_ANSWERS, b"new") is not None
    finally:
        await service.stop()
