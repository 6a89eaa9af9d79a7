"""rocksidecar.rmq.periodic: the background loop behind the heartbeat and the route refresh."""

from __future__ import annotations

import asyncio

from rocksidecar.rmq.periodic import Periodic


class StepSleep:
    """An injected sleep that returns only when the test releases it: one round per release."""

    def __init__(self) -> None:
        self.intervals: list[float] = []
        self.waiting = asyncio.Event()
        self._go = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.intervals.append(seconds)
        self.waiting.set()
        await self._go.wait()
        self._go.clear()

    async def release(self) -> None:
        """Let one sleep end and wait until the loop sleeps again (its round is done)."""
        await self.waiting.wait()
        self.waiting.clear()
        self._go.set()
        await self.waiting.wait()


async def test_rounds_run_every_interval_and_a_failing_round_does_not_end_the_loop() -> None:
    sleep = StepSleep()
    rounds: list[int] = []

    async def job() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 2:
            raise RuntimeError("one bad round")

    periodic = Periodic("test-periodic", 7.5, job, sleep)
    periodic.start()
    periodic.start()  # idempotent: still one loop
    for _ in range(3):
        await sleep.release()
    assert rounds == [0, 1, 2]  # the second round raised; the third still ran
    assert sleep.intervals == [7.5] * 4  # nothing runs before the first interval
    await periodic.close()
    await periodic.close()  # closing twice is harmless
    assert rounds == [0, 1, 2]


async def test_close_before_start_is_a_no_op() -> None:
    async def job() -> None:
        raise AssertionError("never runs")

    await Periodic("unused", 1.0, job).close()
