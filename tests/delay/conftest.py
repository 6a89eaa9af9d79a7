from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from rocksidecar.delay.keys import COLUMN_FAMILIES
from rocksidecar.delay.message import DelayedMessage
from rocksidecar.delay.scheduler import DelayScheduler
from rocksidecar.delay.store import DelayStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock, FaultyKV

SETTLE_S = 10.0  # a safety net against hangs, never a synchronisation point
START_MS = 1_700_000_000_000


class Refused(Exception):
    """A publish outcome for a message that was not stored anywhere."""


def message(id_: str, due_ms: int, topic: str = "orders", **kw: object) -> DelayedMessage:
    return DelayedMessage(id=id_, topic=topic, body=f"body of {id_}".encode(), due_ms=due_ms, **kw)  # type: ignore[arg-type]


@dataclass
class Harness:
    """A delay store on MemoryKV (behind FaultyKV) with a fake clock, publishing into a script."""

    clock: FakeWallClock
    kv: FaultyKV
    writer: GroupCommitWriter
    store: DelayStore
    published: list[DelayedMessage] = field(default_factory=list)  # as handed to publish, in order
    published_at: list[int] = field(default_factory=list)  # store clock at each publish call
    calls: list[int] = field(default_factory=list)  # batch size per publish call
    max_concurrent: int = 0
    refuse: set[str] = field(default_factory=set)  # ids whose publish fails while listed
    gate: asyncio.Event | None = None  # publish calls wait for it when set
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # set when a publish call starts or ends
    lateness_s: list[float] = field(default_factory=list)
    scheduler: DelayScheduler | None = None
    _concurrent: int = 0

    async def publish(self, msgs: list[DelayedMessage]) -> list[BaseException | None]:
        self.calls.append(len(msgs))
        self._concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self._concurrent)
        self.entered.set()
        self.changed.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            outcomes: list[BaseException | None] = []
            for msg in msgs:
                if msg.id in self.refuse:
                    outcomes.append(Refused(msg.id))
                else:
                    self.published.append(msg)
                    self.published_at.append(self.store.now_ms())
                    outcomes.append(None)
            return outcomes
        finally:
            self._concurrent -= 1
            self.changed.set()

    def start(self, **kwargs: object) -> DelayScheduler:
        self.scheduler = DelayScheduler(
            self.store,
            self.publish,
            sleep=self.clock.sleep,
            on_published=lambda lateness_s, _msg: self.lateness_s.append(lateness_s),
            **kwargs,  # type: ignore[arg-type]
        )
        return self.scheduler

    def ids(self) -> list[str]:
        return [m.id for m in self.published]

    async def settle(self) -> None:
        assert self.scheduler is not None
        await asyncio.wait_for(self.scheduler.wait_idle(), SETTLE_S)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()

    async def restart(self, **kwargs: object) -> None:
        """A new store and scheduler over the same KV, as after a process restart."""
        if self.scheduler is not None:
            await self.scheduler.close()
        await self.store.close()
        self.store = DelayStore(self.kv, self.writer, now_ms=self.clock.now_ms, clock=self.clock.monotonic)
        await self.start(**kwargs).start()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, re-checking whenever a publish call starts or ends."""

        async def wait() -> None:
            while not condition():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), SETTLE_S)


def make_harness(start_ms: int = START_MS, **store_kw: object) -> Harness:
    clock = FakeWallClock(start_ms=start_ms)
    kv = FaultyKV(MemoryKV(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic, **store_kw)  # type: ignore[arg-type]
    return Harness(clock, kv, writer, store)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = make_harness()
    yield harness
    if harness.scheduler is not None:
        await harness.scheduler.close()
    await harness.store.close()
    await harness.writer.close()
