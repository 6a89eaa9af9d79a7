"""SteadyClock: wall-clock milliseconds for due times that never run backwards (R5).

Due times are wall-clock milliseconds (they are stored and survive restarts), but the wall clock can
be stepped back by NTP or an operator. A rollback would make due keys look undue (stall) and new keys
sort before a replay cursor. This clock follows the wall clock forward and, when the wall clock
goes back, keeps advancing from its last value at the monotonic clock's rate instead.

So after a step back it runs ahead of the wall clock by the step, for good (the lead is persisted with
the high-water mark): right for due times counted from it (a delay, a retry rung), wrong for absolute
wall times from outside (a client's deliverAt, a broker's timestamp): those are moved onto it by adding
``lead_ms()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# A wall clock behind the carried time by less than this is slewing (NTP runs it a little slower than
# the monotonic clock), not stepped back: follow it, waiting for it rather than running ahead of it.
SLEW_MS = 1000


class SteadyClock:
    """``now()`` = the wall clock, never less than its last value; after the wall clock is stepped back by
    more than SLEW_MS, its last value + monotonic time elapsed since it."""

    def __init__(
        self, now_ms: Callable[[], int] = wall_ms, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._now_ms = now_ms
        self._clock = clock
        self._anchor_ms = now_ms()
        self._anchor_mono = clock()

    def now(self) -> int:
        mono = self._clock()
        # Measured from a fixed anchor so float noise never accumulates; 1e-6 absorbs 4.9 s
        # becoming 4.8999999 s in binary floating point.
        carried = self._anchor_ms + int((mono - self._anchor_mono) * 1000 + 1e-6)
        wall = self._now_ms()
        if wall >= carried - SLEW_MS:
            # Follow the wall clock (the usual case). Not the carried time when it leads by a few ms: the
            # monotonic clock runs faster than a slewed wall clock, and the lead would grow with every
            # call and publish due messages early (seen on real RocketMQ: 2 ms after a minute).
            now = max(wall, self._anchor_ms)
            self._anchor_ms, self._anchor_mono = now, mono if now == wall else self._anchor_mono
            return now
        return carried

    def lead_ms(self) -> int:
        """How far this clock runs ahead of the wall clock: 0 in the usual case; after the wall clock was
        stepped back, the step. A wall time ``at`` (a client's deliverAt, a broker's timestamp) is
        ``at + lead_ms()`` on this clock: due when the wall clock reaches it, not the step earlier. (After
        a step back of less than SLEW_MS this clock waits for the wall clock: such a time is then up to
        the step late, never early.)"""
        return max(0, self.now() - self._now_ms())

    def restore(self, high_water_ms: int) -> None:
        """Never report less than ``high_water_ms`` (the clock persisted before a restart)."""
        if high_water_ms > self.now():
            self._anchor_ms, self._anchor_mono = high_water_ms, self._clock()
