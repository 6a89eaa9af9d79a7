"""One contract for the due-queue engine, run against both stores built on it (issue 12 item 2): the
retry store with its replay loop and the delay store with its scheduler.

Due order, waking on an earlier key, idleness, the loop's failure, and the rule from issue 11: the
persisted floor never passes a key that is not acknowledged, after a SIGTERM (loop and store closed)
as after a SIGKILL (nothing closed: only what batches wrote survives). The KV outlives the store
objects, as the disk outlives the process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pytest

from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay.keys import DUE_CF, due_key
from rocksidecar.delay.keys import META_CF as DELAY_META_CF
from rocksidecar.delay.message import DelayedMessage
from rocksidecar.delay.scheduler import DelayScheduler
from rocksidecar.delay.store import DelayStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.keys import META_CF as RETRY_META_CF
from rocksidecar.retry.keys import PENDING_CF
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.due_loop import DueLoop
from rocksidecar.storage.due_queue import DueQueue
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.progress import FLOOR_KEY
from tests.fakes import FakeWallClock

SETTLE_S = 10.0  # a safety net against hangs, never a synchronisation point


class Loop(Protocol):
    failure: BaseException | None

    async def start(self) -> None: ...
    async def close(self, grace_s: float = 0.0) -> None: ...
    async def wait_idle(self) -> None: ...


@dataclass
class Side:
    """One store kind behind the contract: how to open it over a KV, add a key, and run its loop."""

    kind: str
    clock: FakeWallClock
    kv: MemoryKV
    due_cf: str
    meta_cf: str
    gate: asyncio.Event | None = None
    handled: list[str] = field(default_factory=list)  # ids delivered or published, in order
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    store: RetryStore | DelayStore | None = None
    writer: GroupCommitWriter | None = None
    loop: Loop | None = None

    def open(self) -> None:
        if self.kind == "retry":
            self.store = RetryStore(self.kv, now_ms=self.clock.now_ms, clock=self.clock.monotonic)
        else:
            self.writer = GroupCommitWriter(self.kv)
            self.store = DelayStore(
                self.kv, self.writer, now_ms=self.clock.now_ms, clock=self.clock.monotonic
            )

    @property
    def queue(self) -> DueQueue:
        assert self.store is not None
        return self.store.queue

    async def add(self, id_: str, due_ms: int) -> bytes:
        store = self.store
        if isinstance(store, RetryStore):
            return await store.spool(RetryRecord(id=id_, topic="orders", body=b"x"), due_ms)
        assert isinstance(store, DelayStore)
        await store.schedule(DelayedMessage(id=id_, topic="orders", body=b"x", due_ms=due_ms))
        return due_key(due_ms, id_)

    async def _pass(self, ids: Sequence[str]) -> None:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        self.handled.extend(ids)

    async def _deliver(self, record: RetryRecord) -> None:
        await self._pass([record.id])

    async def _publish(self, msgs: list[DelayedMessage]) -> list[BaseException | None]:
        await self._pass([m.id for m in msgs])
        return [None] * len(msgs)

    def start_loop(self) -> Loop:
        store = self.store
        if isinstance(store, RetryStore):
            self.loop = ReplayLoop(
                store, self._deliver, lambda _: RetryPolicy(), workers=2, queue_size=4, sleep=self.clock.sleep
            )
        else:
            assert isinstance(store, DelayStore)
            self.loop = DelayScheduler(
                store, self._publish, batch_max=2, max_in_flight=2, sleep=self.clock.sleep
            )
        return self.loop

    async def settle(self) -> None:
        assert self.loop is not None
        await asyncio.wait_for(self.loop.wait_idle(), SETTLE_S)

    async def close(self) -> None:
        """SIGTERM: the loop and the store close (the floor is saved)."""
        if self.loop is not None:
            await self.loop.close()
            self.loop = None
        if self.store is not None:
            await self.store.close()
            self.store = None
        if self.writer is not None:
            await self.writer.close()
            self.writer = None

    async def kill(self) -> None:
        """SIGKILL: the tasks stop and nothing more is written; the KV keeps what batches wrote."""
        if self.loop is not None:
            await self.loop.close()  # writes nothing: cancels the seek task and the deliveries
            self.loop = None
        self.store = None  # no close(): the last floor is whatever a batch carried
        if self.writer is not None:
            await self.writer.close()
            self.writer = None

    def live_keys(self) -> list[bytes]:
        return [key for key, _ in self.kv.scan(self.due_cf)]

    def floor_on_disk(self) -> bytes:
        return self.kv.get(self.meta_cf, FLOOR_KEY) or b""


@pytest.fixture(params=["retry", "delay"])
async def side(request: pytest.FixtureRequest) -> AsyncIterator[Side]:
    clock = FakeWallClock()
    if request.param == "retry":
        s = Side("retry", clock, MemoryKV(RETRY_CFS), PENDING_CF, RETRY_META_CF)
    else:
        s = Side("delay", clock, MemoryKV(DELAY_CFS), DUE_CF, DELAY_META_CF)
    s.open()
    yield s
    if s.gate is not None:
        s.gate.set()
    await s.close()


async def test_keys_sort_in_due_order_and_due_reads_only_what_is_due(side: Side) -> None:
    now = side.queue.now_ms()
    late = await side.add("LATE", now + 5000)
    early = await side.add("EARLY", now + 1000)
    assert side.queue.first() == early
    assert side.queue.due(b"", now, 10) == []
    assert [k for k, _ in side.queue.due(b"", now + 1000, 10)] == [early]
    assert [k for k, _ in side.queue.due(b"", now + 5000, 10)] == [early, late]


async def test_the_loop_sleeps_until_the_first_due_key_then_goes_idle(side: Side) -> None:
    now = side.queue.now_ms()
    await side.add("A", now + 2000)
    await side.start_loop().start()
    await side.settle()
    assert side.handled == []
    side.clock.advance(2.0)
    await side.settle()
    assert side.handled == ["A"]
    assert side.live_keys() == []


async def test_an_earlier_key_wakes_the_sleeping_loop(side: Side) -> None:
    now = side.queue.now_ms()
    await side.add("LATER", now + 3_600_000)
    await side.start_loop().start()
    await side.settle()  # asleep until the hour is up
    await side.add("SOON", now + 500)
    side.clock.advance(0.5)
    await side.settle()
    assert side.handled == ["SOON"]


async def test_a_key_committed_behind_the_cursor_is_not_missed(side: Side) -> None:
    now = side.queue.now_ms()
    await side.add("B", now)
    await side.start_loop().start()
    await side.settle()
    await side.add("A", now - 10)  # sorts below the cursor, which already passed B
    await side.settle()
    assert side.handled == ["B", "A"]


async def test_the_floor_never_passes_a_key_in_flight(side: Side) -> None:
    now = side.queue.now_ms()
    side.gate = asyncio.Event()
    keys = [await side.add(f"M{i}", now) for i in range(6)]
    await side.start_loop().start()
    await asyncio.wait_for(side.entered.wait(), SETTLE_S)  # one is being handled
    await side.add("NEXT", now + 60_000)  # a batch that carries the floor
    assert side.queue.floor <= keys[0]
    assert side.floor_on_disk() <= keys[0]
    side.gate.set()
    await side.settle()
    assert sorted(side.handled) == [f"M{i}" for i in range(6)]
    assert side.queue.floor > keys[-1]  # all finished: the floor moves on


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
async def test_the_persisted_floor_never_passes_an_unacknowledged_key(side: Side, stop: str) -> None:
    """Issue 11's rule, for both stores: whatever stopped the process while keys were in flight or
    queued, the floor on disk is at or below every live key, and the next start hands them all out."""
    now = side.queue.now_ms()
    side.gate = asyncio.Event()
    for i in range(8):
        await side.add(f"M{i}", now - 1000 + i)
    await side.start_loop().start()
    await asyncio.wait_for(side.entered.wait(), SETTLE_S)  # one is being handled
    await side.add("LATER", now + 60_000)
    await (side.close() if stop == "sigterm" else side.kill())
    live = side.live_keys()
    assert live, "the stop must leave unacknowledged keys behind"
    assert side.floor_on_disk() <= live[0], "the persisted floor is above an unacknowledged key"
    side.gate = None
    side.open()
    assert side.queue.floor <= live[0]
    await side.start_loop().start()
    side.clock.advance(60.0)
    await side.settle()
    assert {f"M{i}" for i in range(8)} | {"LATER"} <= set(side.handled)
    assert side.live_keys() == []


async def test_a_dying_seek_loop_is_reported_by_wait_idle(
    side: Side, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(start: bytes, now_ms: int, limit: int) -> list[tuple[bytes, bytes]]:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(side.queue, "due", broken)
    monkeypatch.setattr(side.store, "due", broken)
    loop = side.start_loop()
    await loop.start()
    with pytest.raises(RuntimeError, match="seek loop died"):
        await asyncio.wait_for(loop.wait_idle(), SETTLE_S)
    assert isinstance(loop.failure, RuntimeError)
    assert isinstance(loop, DueLoop)
