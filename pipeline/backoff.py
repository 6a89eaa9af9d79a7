"""How long to wait before asking the sidecar again: exponential with jitter, or the server's
Retry-After, never longer than a cap. Pure; the sleeping is done by the caller."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

# The most delta-seconds a Retry-After is read as (~31 700 years): a longer run of digits means "a very
# long time", and each caller caps it anyway; bounding it keeps float() away from 10 000-digit numbers.
MAX_DELTA_S = 999_999_999_999.0


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


def parse_retry_after(value: str | None, now_s: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header, RFC 9110's two forms: delta-seconds (ASCII digits) or an
    HTTP date (needs ``now_s``, wall-clock seconds). Absent, malformed or (dates only) unparseable: None,
    and the caller uses its own back-off. A date in the past is 0. The one parser of the project: the
    sidecar reads the app's answers with it (app.subscriptions), the Spark sink the sidecar's."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        digits = value.lstrip("0")  # leading zeros do not count toward the bound: "0005" is 5 s
        return float(digits or 0) if len(digits) <= 12 else MAX_DELTA_S
    if now_s is None or not value:
        return None
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(when - now_s, 0.0)
