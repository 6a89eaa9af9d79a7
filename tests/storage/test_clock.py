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


def test_lead_ms_is_the_step_back_it_runs_ahead_of_the_wall_clock_by() -> None:
    """lead_ms: what a wall time (a client's deliverAt, a broker's timestamp) needs added to be due on
    this clock when the wall clock reaches it. 0 while it follows the wall clock; the step after a step
    back, kept as time passes (both clocks move alike) and across a restart (restore); 0 again once the
    wall clock is set forward past it."""
    fake = FakeWallClock(start_ms=100_000)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    assert clock.lead_ms() == 0
    fake.advance(5.0)
    assert clock.lead_ms() == 0
    fake.step_wall(-60_000)
    assert clock.lead_ms() == 60_000
    fake.advance(3600.0)
    assert clock.lead_ms() == 60_000
    assert clock.now() == fake.now_ms() + 60_000
    again = SteadyClock(fake.now_ms, fake.monotonic)  # a restart: the high-water mark restored
    again.restore(clock.now())
    assert again.lead_ms() == 60_000
    fake.step_wall(90_000)  # set forward past it: followed
    assert clock.lead_ms() == 0 == again.lead_ms()


def test_lead_ms_within_a_small_step_back_makes_a_wall_time_late_never_early() -> None:
    """Back by less than SLEW_MS the clock waits for the wall clock: a wall time moved by lead_ms is due
    at most the step late."""
    fake = FakeWallClock(start_ms=100_000)
    clock = SteadyClock(fake.now_ms, fake.monotonic)
    fake.step_wall(-300)
    at = fake.now_ms() + 100  # wall 99 800: due at wall 99 800
    due = at + clock.lead_ms()
    assert due == 100_100
    fake.advance(0.1)
    assert clock.now() < due  # not early
    fake.advance(0.3)
    assert clock.now() == due  # the step (300 ms) late
