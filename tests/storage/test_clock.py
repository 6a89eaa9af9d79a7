"""SteadyClock follows the wall clock forward and never back (R5)."""

from __future__ import annotations

from storage.clock import SteadyClock
from tests.fakes import FakeWallClock


def test_follows_the_wall_clock() -> None:
    fake = FakeWallClock(start_ms=10_000)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    assert clock.now() == 10_000
    fake.advance(1.5)
    assert clock.now() == 11_500


def test_a_rollback_keeps_time_moving_at_the_monotonic_rate() -> None:
    fake = FakeWallClock(start_ms=100_000)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    fake.step_wall(-60_000)
    assert clock.now() == 100_000
    fake.advance(2.0)
    assert clock.now() == 102_000  # the wall says 42 000; we keep counting from where we were
    fake.advance(59.0)
    assert clock.now() == 161_000
    fake.step_wall(120_000)  # forward steps are followed
    assert clock.now() == fake.now_ms() == 221_000


def test_sub_millisecond_ticks_accumulate() -> None:
    fake = FakeWallClock(start_ms=0)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    fake.step_wall(-10_000)
    for _ in range(10):
        fake.mono_s += 0.0004
        clock.now()
    assert clock.now() == 4


def test_restore_persisted_high_water() -> None:
    fake = FakeWallClock(start_ms=50_000)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    clock.restore(80_000)
    assert clock.now() == 80_000
    clock.restore(10_000)  # never goes back
    fake.advance(1.0)
    assert clock.now() == 81_000
