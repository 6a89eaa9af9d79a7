"""Retry policy per message type: the back-off ladder and the retry limit. Pure."""

from __future__ import annotations

from dataclasses import dataclass

# The seed's ladder: 3 s, 5 s, 30 s, 1 min, 2 min, 5 min, 8 min, 10 min, 15 min, 30 min.
DEFAULT_LADDER_S: tuple[float, ...] = (3.0, 5.0, 30.0, 60.0, 120.0, 300.0, 480.0, 600.0, 900.0, 1800.0)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``ladder_s[n]`` is the wait before retry n+1; past the ladder's end its last rung repeats."""

    ladder_s: tuple[float, ...] = DEFAULT_LADDER_S
    max_retries: int = len(DEFAULT_LADDER_S)

    def delay_s(self, retry_count: int) -> float:
        """Seconds to wait before the attempt that follows ``retry_count`` failed retries."""
        return self.ladder_s[min(retry_count, len(self.ladder_s) - 1)]

    def exhausted(self, retry_count: int) -> bool:
        return retry_count >= self.max_retries
