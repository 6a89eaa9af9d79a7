"""SteadyClock follows the wall clock forward and never back (R5)."""

from __future__ import annotations

from rocksidecar.storage.clock import SteadyClock
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


def test_a_slewed_wall_clock_is_followed_never_led() -> None:
    """The monotonic clock running faster than the wall clock (NTP slewing it) must not make the clock
    lead the wall clock: due messages would be published early."""
    fake = FakeWallClock(start_ms=1_000_000)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    wall = float(fake.wall_ms)
    for _ in range(60_000):  # a minute of 1 ms ticks, the wall clock 0.05 % slower
        fake.mono_s += 0.001
        wall += 0.9995
        fake.wall_ms = int(wall)
        assert clock.now() <= fake.now_ms()
    assert clock.now() == fake.now_ms()


def test_a_small_step_back_waits_for_the_wall_clock() -> None:
    fake = FakeWallClock(start_ms=100_000)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    fake.step_wall(-300)
    assert clock.now() == 100_000  # never back
    fake.advance(0.2)
    assert clock.now() == 100_000  # waits (late by at most SLEW_MS), never early
    fake.advance(0.2)
    assert clock.now() == 100_100 == fake.now_ms()
