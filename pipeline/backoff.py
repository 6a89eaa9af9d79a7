"""How long to wait before asking the sidecar again: exponential with jitter, or the server's
Retry-After, never longer than a cap. Pure; the sleeping is done by the caller."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0 = the first)."""
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), self.max_s)
        ceiling = min(self.initial_s * self.multiplier ** min(attempt, 32), self.max_s)
        # "equal jitter": at least half the step, so tasks that failed together spread out
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds; an HTTP date or garbage counts as absent."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
