"""Rock-DMQ beats after the local wall clock was stepped back.

A beat heard before the step is in the future by the reader's clock afterwards. Kept so, a replica that
froze just before the step looked fresh for the size of the step (an hour), and a beat heard after it was
older than the stored one and ignored. The module's rule, a beat from the future counts as sent now, now
holds when reading too (app.dmq.beats.Beats): its age counts from the first reading after the step, and
the presence loop reads at least every beat interval, so a silent replica goes stale within the timeout
of that reading.
"""

from __future__ import annotations

from rocksidecar.app.dmq import beats

NAMES = ("dmq-0", "dmq-1")
HOUR_MS = 3_600_000
TIMEOUT_MS = 2000
INTERVAL_MS = 500  # how often the presence loop reads the beats (live, next_stale_ms)


def test_a_replica_silent_after_a_backward_clock_step_goes_stale_within_the_timeout() -> None:
    now = [1_700_000_000_000]
    b = beats.Beats(NAMES, TIMEOUT_MS, clock_ms=lambda: now[0])
    b.heard(beats.Beat("dmq-1", now[0]))  # its last beat; then it freezes (SIGSTOP)
    assert b.fresh("dmq-1")
    now[0] -= HOUR_MS  # the local wall clock is stepped back an hour
    stale_after = None
    for t in range(0, 10_000, INTERVAL_MS):  # 10 s of silence, read as the presence loop reads
        now[0] += INTERVAL_MS if t else 0
        stale = b.next_stale_ms()
        assert stale is None or stale - now[0] <= TIMEOUT_MS + 1  # the loop never sleeps past it
        if not b.fresh("dmq-1") and stale_after is None:
            stale_after = t
    assert stale_after is not None, f"still fresh after 10 s of silence (age {b.age_ms('dmq-1')} ms)"
    assert stale_after <= TIMEOUT_MS + INTERVAL_MS
    assert b.age_ms("dmq-1") == 10_000 - INTERVAL_MS
    assert b.silent("dmq-1", 0)


def test_a_beat_heard_after_a_backward_step_is_taken() -> None:
    now = [1_700_000_000_000]
    b = beats.Beats(NAMES, TIMEOUT_MS, clock_ms=lambda: now[0])
    b.heard(beats.Beat("dmq-0", now[0]))
    now[0] -= HOUR_MS
    now[0] += 1000
    assert b.heard(beats.Beat("dmq-0", now[0]))  # its sender's clock was stepped back alike
    assert b.last_ms("dmq-0") == now[0]
    now[0] += TIMEOUT_MS
    assert b.fresh("dmq-0")
    now[0] += 1
    assert not b.fresh("dmq-0")


def test_silence_since_a_time_read_before_a_backward_step_counts_from_now() -> None:
    """``silent(name, since)`` with ``since`` (a start, the end of a catch-up) from before the step: the
    replica's own silence is seen within the timeout, not an hour later."""
    now = [1_700_000_000_000]
    b = beats.Beats(NAMES, TIMEOUT_MS, clock_ms=lambda: now[0])
    since = now[0]
    now[0] -= HOUR_MS
    assert not b.silent("dmq-0", since)  # the first reading after the step: silence counts from here
    now[0] += TIMEOUT_MS
    assert not b.silent("dmq-0", since)
    now[0] += 1
    assert b.silent("dmq-0", since)
    b.heard(beats.Beat("dmq-0", now[0]))  # heard again: not silent
    assert not b.silent("dmq-0", since)
    later = now[0]  # a new since (a catch-up ended) is taken as it is
    now[0] += TIMEOUT_MS + 1
    assert b.silent("dmq-0", later) and not b.silent("dmq-0", later + 1)
