"""rocksidecar.rmq.periodic: the background loop behind the heartbeat and the route refresh."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rocksidecar.rmq.periodic import REPEAT_LOG_EVERY_S, Periodic


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


async def test_a_repeating_failure_is_logged_once_with_its_traceback_then_at_most_every_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sleep = StepSleep()
    now = [0.0]
    rounds: list[int] = []

    async def job() -> None:
        rounds.append(len(rounds))
        raise RuntimeError("store unreachable")

    periodic = Periodic("test-periodic", 5.0, job, sleep, run_first=True, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, logger="rocksidecar.rmq.periodic"):
        periodic.start()
        await sleep.waiting.wait()  # run_first: the first round ran before any sleep
        for _ in range(3):
            now[0] += 5.0
            await sleep.release()
        assert rounds == [0, 1, 2, 3]  # every round ran although each one raised
        assert len(caplog.records) == 1  # the same failure four times: one line
        assert caplog.records[0].exc_info is not None  # with its traceback
        assert "test-periodic: round failed" in caplog.records[0].getMessage()
        now[0] += REPEAT_LOG_EVERY_S
        await sleep.release()
    await periodic.close()
    assert periodic.failures == 5
    assert len(caplog.records) == 2
    assert "3 more failed rounds since the last report" in caplog.records[1].getMessage()


async def test_a_new_failure_is_logged_at_once() -> None:
    errors = iter([RuntimeError("a"), RuntimeError("a"), ValueError("b")])
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(str(record.exc_info[1]) if record.exc_info else "")

    logger = logging.getLogger("test-periodic-new-failure")
    logger.addHandler(Capture())

    async def job() -> None:
        raise next(errors)

    periodic = Periodic("p", 1.0, job, clock=lambda: 0.0, logger=logger)
    for _ in range(3):
        await periodic.run_once()
    assert lines == ["a", "b"]
