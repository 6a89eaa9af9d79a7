"""Review (session 30) of the operator's actions on a running retry store: purge and re-drive by filter.

Each test fails on today's code for the reason its docstring states."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Awaitable, Iterator
from typing import TypeVar

from rocksidecar.retry.admin import purge, redrive
from rocksidecar.retry.dead_letter import encode_dead
from rocksidecar.retry.keys import (
    DEAD,
    DEAD_CF,
    INDEX_CF,
    PENDING,
    PENDING_CF,
    dead_key,
    index_key,
    pending_key,
)
from rocksidecar.retry.record import RetryRecord, encode_record
from rocksidecar.storage.kv import Op, Put
from rocksidecar.storage.query import SCAN_BUDGET, Filter
from tests.fakes import FakeWallClock
from tests.retry.conftest import Harness, record

T = TypeVar("T")

MANY = 3 * SCAN_BUDGET  # more than one page's scan budget, a small "large store"
MIB = 1024 * 1024


def _fill_pending(h: Harness, n: int, topic: str = "orders") -> None:
    """``n`` pending messages of ``topic``, written straight into the KV (fast; counts not needed)."""
    now = h.store.now_ms()
    ops: list[Op] = []
    for i in range(n):
        rec = record(f"P{i}", topic)
        key = pending_key(now, 0, rec.type, rec.id)
        ops += [Put(PENDING_CF, key, encode_record(rec)), Put(INDEX_CF, index_key(rec.id, PENDING, key), b"")]
    h.kv.inner.write(ops, sync=False)


def _fill_dead(h: Harness, n: int, topic: str = "orders") -> None:
    """``n`` dead letters of ``topic``, dead now, written straight into the KV."""
    now = h.store.now_ms()
    ops: list[Op] = []
    for i in range(n):
        rec = record(f"D{i}", topic)
        dkey = dead_key(now, pending_key(now, 0, rec.type, rec.id))
        ops += [
            Put(DEAD_CF, dkey, encode_dead("MESSAGE_ILLEGAL", now, encode_record(rec))),
            Put(INDEX_CF, index_key(rec.id, DEAD, dkey), b""),
        ]
    h.kv.inner.write(ops, sync=False)


async def _steps_of_others_during(call: Awaitable[T]) -> tuple[T, int]:
    """(``call``'s result, how many times another task got to run while it ran)."""
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker has run once and waits for its next turn
    start = ticks
    result = await call
    during = ticks - start
    stop = True
    await task
    return result, during


async def test_a_purge_whose_filter_matches_nothing_lets_the_event_loop_run_between_pages(h: Harness) -> None:
    """A purge pages through the store PURGE_CHUNK matches or SCAN_BUDGET keys at a time, but a page
    without a match is never written, so nothing is awaited: a topic purge that matches little of a
    large store reads all of it in one event-loop step (the replay, the HTTP and gRPC APIs, heartbeats
    and health probes all stand still). Expected: other tasks run between pages. Actual: none does."""
    _fill_pending(h, MANY, topic="orders")
    (deleted, skipped), others = await _steps_of_others_during(
        purge(h.store, "pending", Filter(topic="payments"), in_flight=lambda _: False)
    )
    assert (deleted, skipped) == (0, 0)
    assert others > 0, f"the purge read {MANY} pending messages without once letting another task run"


async def test_a_redrive_whose_filter_matches_nothing_answers_within_its_deadline(h: Harness) -> None:
    """redrive() promises to stop after ``deadline_s`` with a cursor (REDRIVE_DEADLINE_S: "a caller's
    request answers within this"), but checks the deadline only before moving a letter: a topic filter
    that matches none of a large dead-letter store walks all of it in one call, and in one event-loop
    step (no await without a match). Expected: a cursor once the deadline passed (and other tasks run).
    Actual: the whole store is read, nextCursor null, nothing else ran meanwhile."""
    _fill_dead(h, MANY, topic="orders")
    h.clock.advance(0.001)
    mono = FakeWallClock()
    scanned = 0
    real_iterate = h.kv.inner.iterate

    # Every read of a MemoryKV goes through iterate (its scan too): the rows read are counted here.
    def counting_iterate(cf: str, **kw: object) -> Iterator[tuple[bytes, bytes]]:
        nonlocal scanned
        for row in real_iterate(cf, **kw):  # type: ignore[arg-type]
            if cf == DEAD_CF:
                scanned += 1
            yield row

    def slow_clock() -> float:
        mono.mono_s += 1.0  # every look at the clock is a second later: the deadline is long gone
        return mono.monotonic()

    h.kv.inner.iterate = counting_iterate  # type: ignore[method-assign]
    done, others = await _steps_of_others_during(
        redrive(h.store, Filter(topic="payments"), deadline_s=2.0, clock=slow_clock)
    )
    assert (done.moved, done.skipped) == (0, 0)
    assert done.cursor is not None, f"read {scanned} dead letters past its deadline and answered done"
    assert scanned < MANY
    assert others > 0


async def _spool_big(h: Harness, n: int, body_bytes: int) -> None:
    for i in range(n):
        await h.store.spool(RetryRecord(id=f"B{i}", topic="orders", body=bytes([i % 251]) * body_bytes))


async def test_a_purge_does_not_hold_every_body_of_its_chunk_at_once(h: Harness) -> None:
    """A purge needs keys (and each record's first-failure time), yet reads a chunk of up to
    PURGE_CHUNK (1000) matches as decoded records, bodies and all, and holds them together while the
    store re-reads the same values for its batch: with 4 MiB bodies (the default limit; 64 MiB allowed)
    one purge call asks for 4 GB and more. Expected: memory bounded well below the sum of the bodies
    it deletes. Actual: at least every body of the chunk (here 48 MiB) allocated at once."""
    n = 48
    await _spool_big(h, n, MIB)
    tracemalloc.start()
    try:
        deleted, _ = await purge(h.store, "pending", Filter(), in_flight=lambda _: False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert deleted == n
    assert peak < 16 * MIB, f"one purge of {n} MiB of bodies peaked at {peak / MIB:.0f} MiB"


async def test_a_redrive_does_not_hold_every_body_of_its_chunk_at_once(h: Harness) -> None:
    """The same for a re-drive by filter: dead_page(limit=PURGE_CHUNK) decodes up to 1000 dead letters,
    bodies and all, before the first is moved (store.redrive reads each again). Expected: memory bounded
    well below the bodies re-driven. Actual: every body of the chunk allocated at once."""
    n = 48
    await _spool_big(h, n, MIB)
    for key, _ in h.kv.scan(PENDING_CF):
        rec = h.store.pending_record(key)
        assert rec is not None
        await h.store.bury(key, rec, "MESSAGE_ILLEGAL")
    h.clock.advance(0.001)
    tracemalloc.start()
    try:
        done = await redrive(h.store, Filter())
        # What is still allocated at the end is the re-driven records' new values, which the in-memory
        # KV keeps (the store's content, on disk with RocksDB): the redrive's own holding is above it.
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (done.moved, done.cursor) == (n, None)
    over = peak - held
    assert over < 16 * MIB, f"one redrive of {n} MiB of bodies held {over / MIB:.0f} MiB over what it wrote"


async def test_a_redrive_by_id_of_a_corrupt_dead_letter_does_not_answer_there_is_none(h: Harness) -> None:
    """A dead letter whose record is corrupt cannot be re-driven; by filter or all it is answered 200
    with ``skipped``, but by id (the admin route, the status page's per-letter button, the CLI) the
    skip becomes moved == 0 and a 404 "no dead letter for message X", while GET /messages/X and the
    listing show it DEAD. Expected: an answer that says it is there and was not re-driven (skipped, or a
    4xx other than Not found). Actual: 404 Not found."""
    from types import SimpleNamespace

    from rocksidecar.app.api.admin import RedriveIn, redrive_dead
    from rocksidecar.app.request import RequestError
    from rocksidecar.retry.status import State

    key = await h.store.spool(record("C1"))
    await h.store.quarantine(key, b"not a record", "corrupt value: not a stored message")
    status = h.store.get("C1")
    assert status is not None and status.state is State.DEAD
    try:
        done = await redrive_dead(SimpleNamespace(retry=h.store), RedriveIn(id="C1"))  # type: ignore[arg-type]
    except RequestError as exc:
        assert exc.status != 404, f"answered {exc.status} {exc.detail!r} for a dead letter the store holds"
    else:
        assert (done["redriven"], done["skipped"]) == (0, 1)
    assert h.store.dead_count == 1


async def test_a_pending_listing_page_does_not_hold_every_body_at_once(h: Harness) -> None:
    """GET /v1/admin/retries?limit=1000 (pending_page) shows each message's bodyBytes, not its body, yet
    decodes every listed record with its body and holds the page's bodies together: 1000 x 4 MiB (the
    default limit) is 4 GB for one listing. Expected: memory bounded well below the bodies listed.
    Actual: every listed body allocated at once (the same page() path as purge and redrive)."""
    from rocksidecar.retry.admin import pending_page

    n = 48
    await _spool_big(h, n, MIB)
    tracemalloc.start()
    try:
        found = pending_page(h.store, Filter(), limit=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(found.items) == n
    assert peak < 16 * MIB, f"one listing of {n} MiB of bodies peaked at {peak / MIB:.0f} MiB"
