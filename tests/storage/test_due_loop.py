"""DueLoop, the seek half of the due-queue engine the retry replay and the delay scheduler share: what
becomes of its seek task when a pass fails."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from rocksidecar.storage.due_loop import MAX_IDLE_S, DueLoop
from rocksidecar.storage.due_queue import DueQueue
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock

SETTLE_S = 10.0  # a safety net against hangs, never a synchronisation point


class Passes(DueLoop):
    """A loop over an empty queue whose passes fail as ``script`` says (None: the pass reads to its end
    and sleeps); it records each pass and each sleep it asks for."""

    def __init__(self, queue: DueQueue, clock: FakeWallClock) -> None:
        super().__init__(queue, "test", self._record_sleep, read_retry_s=1.0)
        self.clock = clock
        self.script: list[Exception | None] = []
        self.passes: list[int] = []  # store time of each pass
        self.sleeps: list[float] = []  # seconds, per sleep asked for
        self.changed = asyncio.Event()

    def _record_sleep(self, seconds: float) -> asyncio.Future[None]:
        self.sleeps.append(seconds)
        self.changed.set()
        return self.clock.sleep(seconds)

    async def start(self) -> None:
        self._start_seek()

    async def close(self, grace_s: float = 0.0) -> None:
        await self._stop_seek()

    def _busy(self) -> bool:
        return False

    async def _run(self) -> None:
        while True:
            now = self._due_queue.now_ms()
            self.passes.append(now)
            failure = self.script.pop(0) if self.script else None
            if failure is not None:
                raise failure
            await self._wait_until(self._next_due_ms(), now)

    async def until(self, condition: Callable[[], bool]) -> None:
        async def wait() -> None:
            while not condition():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), SETTLE_S)


@pytest.fixture
async def loop() -> AsyncIterator[Passes]:
    clock = FakeWallClock()
    kv = MemoryKV(("due", "meta"))
    writer = GroupCommitWriter(kv)
    queue = DueQueue(kv, writer, "due", "meta", "test", now_ms=clock.now_ms, clock=clock.monotonic)
    passes = Passes(queue, clock)
    yield passes
    await passes.close()
    await writer.close()


async def test_a_failed_read_restarts_the_passes_after_a_back_off_that_doubles_to_its_cap(
    loop: Passes, caplog: pytest.LogCaptureFixture
) -> None:
    eio = StorageError("IO error: While pread offset 0 len 4096: Input/output error")
    loop.script = [eio] * 7 + [None, eio]  # an outage of 7 passes, a pass that works, a second outage
    with caplog.at_level(logging.WARNING, logger="rocksidecar.storage.due_loop"):
        await loop.start()
        for n in range(1, 10):
            await loop.until(lambda n=n: len(loop.sleeps) == n)  # type: ignore[misc]
            loop.clock.advance(loop.sleeps[-1])
        await loop.until(lambda: len(loop.sleeps) == 10)  # the 10th pass works: it sleeps
    assert loop.failure is None and len(loop.passes) == 10
    # 1 s, twice as long up to the cap; a pass that works sleeps until the next key (none: the cap)
    # and the next outage starts from 1 s again
    assert loop.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_IDLE_S, MAX_IDLE_S, MAX_IDLE_S, 1.0, MAX_IDLE_S]
    gaps = [b - a for a, b in zip(loop.passes, loop.passes[1:], strict=False)]
    assert gaps == [round(s * 1000) for s in loop.sleeps[:9]]  # each pass when its sleep ended: no spin
    # once per outage, not once per failed pass
    assert caplog.text.count("cannot be read") == 2 and caplog.text.count("can be read again") == 2


async def test_a_failing_loop_is_not_taken_for_idle(loop: Passes) -> None:
    loop.script = [StorageError("EIO"), None]
    await loop.start()
    await loop.until(lambda: loop.sleeps == [1.0])
    idle = asyncio.create_task(loop.wait_idle())
    await loop.until(lambda: len(loop.sleeps) == 1)  # still in the back-off
    assert not idle.done()
    loop.clock.advance(1.0)
    await asyncio.wait_for(idle, SETTLE_S)  # the pass after it read to its end and sleeps
    assert loop.passes[1] - loop.passes[0] == 1000


async def test_a_bug_in_a_pass_still_ends_the_seek_task_and_says_so(loop: Passes) -> None:
    loop.script = [RuntimeError("a bug")]
    await loop.start()
    with pytest.raises(RuntimeError, match="seek loop died"):
        await asyncio.wait_for(loop.wait_idle(), SETTLE_S)
    assert isinstance(loop.failure, RuntimeError) and loop.sleeps == []
