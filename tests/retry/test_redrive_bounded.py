"""A redrive touches each dead letter it was asked for at most once, even when the letters die again at
once (issue 27 item 1: a broker answering MESSAGE_ILLEGAL made ``{"all": true}`` loop for ever), and
answers within its deadline with a cursor to continue from."""

from __future__ import annotations

from collections import Counter

import pytest

from rocksidecar.retry import admin
from rocksidecar.retry.admin import redrive
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.query import Filter, encode_cursor
from tests.fakes import FakeWallClock
from tests.retry.conftest import Harness, record


async def _dead(store: RetryStore, n: int) -> list[str]:
    ids = [f"M{i}" for i in range(n)]
    for id_ in ids:
        key = await store.spool(record(id_))
        await store.bury(key, record(id_), "MESSAGE_ILLEGAL")
    return ids


class DiesAgainAtOnce:
    """Wraps RetryStore.redrive: the message is buried again as soon as it is back, as a replay meeting
    a broker that refuses with a final error would; ``limit`` stops a loop that would never end."""

    def __init__(self, store: RetryStore, limit: int) -> None:
        self.store, self.limit = store, limit
        self.real = store.redrive
        self.attempts: Counter[str] = Counter()

    async def __call__(self, dkey: bytes) -> bytes:
        key = await self.real(dkey)
        rec = self.store.pending_record(key)
        assert rec is not None
        self.attempts[rec.id] += 1
        if sum(self.attempts.values()) > self.limit:
            raise AssertionError("the redrive keeps finding the letters it re-drove")
        await self.store.bury(key, rec, "MESSAGE_ILLEGAL")
        return key


@pytest.mark.parametrize("later_ms", [0, 5])  # dying again in the start millisecond, or after it
async def test_letters_that_die_again_are_redriven_once(
    h: Harness, later_ms: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "PURGE_CHUNK", 7)  # several pages: the old walk came back to them
    ids = await _dead(h.store, 30)
    h.clock.advance(0.001)
    dies = DiesAgainAtOnce(h.store, limit=3 * len(ids))

    async def redrive_then_later(dkey: bytes) -> bytes:
        key = await dies(dkey)
        h.clock.wall_ms += later_ms
        return key

    h.store.redrive = redrive_then_later  # type: ignore[method-assign]
    done = await redrive(h.store, Filter())
    assert (done.moved, done.skipped, done.cursor) == (len(ids), 0, None)
    assert dies.attempts == Counter(dict.fromkeys(ids, 1))
    assert h.store.dead_count == len(ids)


async def test_the_deadline_answers_with_a_cursor_that_continues(h: Harness) -> None:
    ids = await _dead(h.store, 10)
    h.clock.advance(0.001)
    dies = DiesAgainAtOnce(h.store, limit=3 * len(ids))
    mono = FakeWallClock()

    async def slow(dkey: bytes) -> bytes:
        mono.mono_s += 1.0  # each re-drive takes a second of the injected clock
        return await dies(dkey)

    h.store.redrive = slow  # type: ignore[method-assign]
    first = await redrive(h.store, Filter(), deadline_s=4.0, clock=mono.monotonic)
    assert (first.moved, first.skipped) == (4, 0) and first.cursor is not None
    moved = first.moved
    cursor: str | None = first.cursor
    while cursor is not None:
        h.clock.advance(0.01)  # later calls start later: the cursor keeps the first call's snapshot
        more = await redrive(h.store, Filter(), cursor=cursor, deadline_s=4.0, clock=mono.monotonic)
        moved += more.moved
        cursor = more.cursor
    assert moved == len(ids)
    assert dies.attempts == Counter(dict.fromkeys(ids, 1))


async def test_a_cursor_from_elsewhere_is_refused(h: Harness) -> None:
    await _dead(h.store, 1)
    with pytest.raises(ValueError, match="cursor"):
        await redrive(h.store, Filter(), cursor="AAAA")
    assert h.store.dead_count == 1


async def test_a_cursor_from_the_future_keeps_the_bound_at_now(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cursor carries the start millisecond; one naming a later time than the store's clock (forged, or
    from before the clock was set back) must not lift the bound and bring back the loop."""
    monkeypatch.setattr(admin, "PURGE_CHUNK", 2)  # several pages, as a store with over 1000 letters has
    ids = await _dead(h.store, 5)
    h.clock.advance(0.001)
    dies = DiesAgainAtOnce(h.store, limit=3 * len(ids))

    async def then_a_millisecond_later(dkey: bytes) -> bytes:  # a real clock moves on
        key = await dies(dkey)
        h.clock.wall_ms += 1
        return key

    h.store.redrive = then_a_millisecond_later  # type: ignore[method-assign]
    future = encode_cursor(b"9999999999999" + b"\x00\x00")  # well formed: the year 2286, before every key
    done = await redrive(h.store, Filter(), cursor=future)
    assert (done.moved, done.skipped, done.cursor) == (len(ids), 0, None)
    assert dies.attempts == Counter(dict.fromkeys(ids, 1))
