from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import pytest

from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.keys import COLUMN_FAMILIES
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Op
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock, FaultyKV

SETTLE_S = 10.0  # a safety net against hangs, never a synchronisation point


class Redeliverable(Exception):
    redeliverable = True


class Final(Exception):
    redeliverable = False


def record(id_: str, topic: str = "orders", **kw: object) -> RetryRecord:
    return RetryRecord(id=id_, topic=topic, body=f"body of {id_}".encode(), **kw)  # type: ignore[arg-type]


@dataclass
class Harness:
    """A store on MemoryKV (behind FaultyKV) with a fake clock, and a loop delivering into a script."""

    clock: FakeWallClock
    kv: FaultyKV
    store: RetryStore
    policies: dict[str, RetryPolicy] = field(default_factory=dict)
    # id -> exceptions to raise on successive attempts; an exhausted list means success
    script: dict[str, list[Exception]] = field(default_factory=dict)
    fail_always: dict[str, Exception] = field(default_factory=dict)
    attempts: list[tuple[str, int]] = field(default_factory=list)  # (id, store time) per attempt
    delivered: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    gate: asyncio.Event | None = None
    loop: ReplayLoop | None = None
    in_flight_seen: list[int] = field(default_factory=list)  # loop.in_flight at each attempt
    batch_sizes: list[int] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def deliver(self, rec: RetryRecord) -> None:
        self.attempts.append((rec.id, self.store.now_ms()))
        self.in_flight_seen.append(self.loop.in_flight if self.loop else 0)
        self.changed.set()
        if self.gate is not None:
            await self.gate.wait()
        if rec.id in self.fail_always:
            raise self.fail_always[rec.id]
        queued = self.script.get(rec.id)
        if queued:
            raise queued.pop(0)
        self.delivered.append(rec.id)

    async def deliver_batch(self, records: Sequence[RetryRecord]) -> list[object]:
        """Like deliver, for a batch: one outcome per record (an exception for a failure)."""
        self.batch_sizes.append(len(records))
        outcomes: list[object] = []
        for rec in records:
            try:
                await self.deliver(rec)
                outcomes.append("stored")
            except Exception as exc:
                outcomes.append(exc)
        return outcomes

    def policy_for(self, type_: str) -> RetryPolicy:
        return self.policies.get(type_, RetryPolicy())

    def start_loop(self, **kwargs: object) -> ReplayLoop:
        self.loop = ReplayLoop(
            self.store,
            self.deliver,
            self.policy_for,
            sleep=self.clock.sleep,
            on_replayed=self._on_replayed,
            **kwargs,  # type: ignore[arg-type]
        )
        return self.loop

    def _on_replayed(self, outcome: str) -> None:
        self.outcomes.append(outcome)
        self.changed.set()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, re-checking at each attempt and outcome."""

        async def wait() -> None:
            while not condition():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), SETTLE_S)

    async def settle(self) -> None:
        assert self.loop is not None
        await asyncio.wait_for(self.loop.wait_idle(), SETTLE_S)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()


class GatedWrites:
    """Wraps a GroupCommitWriter's ``write``: each write waits at ``gate`` before it is applied, as one
    queued behind a slow WAL sync does, so a test sees what a second caller finds in that gap."""

    def __init__(self, writer: GroupCommitWriter) -> None:
        self.inner = writer.write
        self.gate = asyncio.Event()
        self.arrived = 0
        self._changed = asyncio.Event()

    async def __call__(self, ops: Sequence[Op], *, lazy: bool = False) -> None:
        self.arrived += 1
        self._changed.set()
        await self.gate.wait()
        await self.inner(ops, lazy=lazy)

    async def until_arrived(self, n: int) -> None:
        """Until ``n`` writes wait at the gate (or went through it)."""
        while self.arrived < n:
            self._changed.clear()
            await self._changed.wait()


def make_harness() -> Harness:
    clock = FakeWallClock()
    kv = FaultyKV(MemoryKV(COLUMN_FAMILIES))
    dead: list[DeadLetter] = []
    store = RetryStore(kv, now_ms=clock.now_ms, clock=clock.monotonic, on_dead_letter=dead.append)
    return Harness(clock, kv, store, dead=dead)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = make_harness()
    yield harness
    if harness.loop is not None:
        await harness.loop.close()
    await harness.store.close()
