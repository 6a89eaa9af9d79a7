"""Latency fault tolerance (the Java client's MQFaultStrategy + LatencyFaultToleranceImpl).

After each send a broker's latency maps through ``latency_max_ms`` to a not-available duration; a failed
send counts as ``isolation_latency_ms``. A broker is skipped until that time passes. When every broker is
backing off, ``pick_one_at_least`` still names the least bad one: sending is never refused outright.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# (broker, new state, reason, back-off in s) when a broker becomes isolated, slow (backoff) or available
# again; the service logs these and replays what waited for the broker. Transitions only: a broker that
# keeps failing while isolated reports once.
StateListener = Callable[[str, str, str, float], None]

LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _FaultItem:
    name: str
    latency_ms: float
    available_at: float  # clock() seconds
    failed: bool  # the last outcome was a failure (isolation), not just a slow answer
    unreachable: bool  # that failure was a transport error (the recovery probe may lift it)


@dataclass(frozen=True, slots=True)
class BrokerState:
    """One row of the fault table, for metrics and the status endpoint."""

    broker: str
    latency_ms: float
    not_available_for_s: float  # 0 when available
    state: str  # "available" | "backoff" (slow) | "isolated" (failed)

    def to_json(self) -> dict[str, Any]:
        """The row as the admin stats and /readyz show it."""
        return {
            "broker": self.broker,
            "state": self.state,
            "latencyMs": round(self.latency_ms, 3),
            "notAvailableForS": round(self.not_available_for_s, 3),
        }


class LatencyFaultTolerance:
    def __init__(
        self,
        latency_max_ms: Iterable[int] = LATENCY_MAX_MS,
        not_available_ms: Iterable[int] = NOT_AVAILABLE_MS,
        *,
        isolation_latency_ms: int = ISOLATION_LATENCY_MS,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_change: StateListener | None = None,
    ) -> None:
        self.on_change = on_change
        self.latency_max_ms = tuple(latency_max_ms)
        self.not_available_ms = tuple(not_available_ms)
        if len(self.latency_max_ms) != len(self.not_available_ms) or not self.latency_max_ms:
            raise ValueError("latency_max_ms and not_available_ms must be non-empty and of equal length")
        if list(self.latency_max_ms) != sorted(self.latency_max_ms):
            raise ValueError("latency_max_ms must be ascending")
        self.isolation_latency_ms = isolation_latency_ms
        # The rungs from the top, and the lowest threshold: a send faster than it (nearly every one) backs
        # off for 0 ms without walking them.
        self._rungs = tuple(zip(reversed(self.latency_max_ms), reversed(self.not_available_ms), strict=True))
        self._lowest_ms = self.latency_max_ms[0]
        self._clock = clock
        self._rng = rng or random.Random()
        self._items: dict[str, _FaultItem] = {}
        self._which_worst = itertools.count()

    def not_available_duration_ms(self, latency_ms: float) -> int:
        """computeNotAvailableDuration: the longest rung whose threshold the latency reaches."""
        for threshold, duration in self._rungs:
            if latency_ms >= threshold:
                return duration
        return 0

    def update(
        self,
        broker: str,
        latency_s: float,
        *,
        isolation: bool,
        unreachable: bool = False,
        reason: str = "",
    ) -> None:
        """Record a send's outcome: its latency, or a failure (``isolation``, ``reason`` says why)."""
        latency_ms = latency_s * 1000.0
        if isolation:
            duration_ms = self.not_available_duration_ms(self.isolation_latency_ms)
        elif latency_ms < self._lowest_ms:  # the usual send: no rung reached, no call
            duration_ms = 0
        else:
            duration_ms = self.not_available_duration_ms(latency_ms)
        now = self._clock()
        previous = self._items.get(broker)
        if previous is None:
            self._items[broker] = _FaultItem(
                broker, latency_ms, now + duration_ms / 1000.0, isolation, isolation and unreachable
            )
            was_failed, was = False, "available"
        else:  # updated in place: no item built per send (nothing keeps an item but this table)
            was_failed = previous.failed
            was = "available" if now >= previous.available_at else ("isolated" if was_failed else "backoff")
            previous.latency_ms, previous.available_at = latency_ms, now + duration_ms / 1000.0
            previous.failed, previous.unreachable = isolation, isolation and unreachable
        if self.on_change is None:
            return
        if isolation and was != "isolated":
            self._notify(broker, "isolated", reason or "send failed", duration_ms / 1000.0)
        elif not isolation and duration_ms > 0 and was == "available":
            self._notify(broker, "backoff", f"slow: {latency_ms:.0f} ms", duration_ms / 1000.0)
        elif not isolation and duration_ms == 0 and was_failed:
            self._notify(broker, "recovered", "a send succeeded", 0.0)

    def _notify(self, broker: str, state: str, reason: str, backoff_s: float) -> None:
        assert self.on_change is not None
        try:
            self.on_change(broker, state, reason, backoff_s)
        except Exception:  # a listener must never break a send
            log.exception("broker state listener failed")

    def is_available(self, broker: str) -> bool:
        item = self._items.get(broker)
        return item is None or self._clock() >= item.available_at

    def mark_recovered(self, broker: str) -> None:
        """The recovery probe reached an isolated broker: make it available again now."""
        item = self._items.get(broker)
        if item is not None:
            was_failed = item.failed
            item.available_at, item.failed, item.unreachable = self._clock(), False, False
            if was_failed and self.on_change is not None:
                self._notify(broker, "recovered", "answered the recovery probe", 0.0)

    def unreachable_brokers(self) -> list[str]:
        now = self._clock()
        return [i.name for i in self._items.values() if i.unreachable and now < i.available_at]

    def remove(self, broker: str) -> None:
        self._items.pop(broker, None)

    def pick_one_at_least(self, candidates: Iterable[str]) -> str | None:
        """Among ``candidates``: sort by availability, then latency, then back-off end; rotate over the
        better half (pickOneAtLeast). Brokers never measured count as available with no latency."""
        now = self._clock()
        rows = []
        for name in candidates:
            item = self._items.get(name)
            if item is None:
                rows.append((0, 0.0, 0.0, name))
            else:
                rows.append((0 if now >= item.available_at else 1, item.latency_ms, item.available_at, name))
        if not rows:
            return None
        self._rng.shuffle(rows)  # equal rows come out in random order, as Java's shuffle-then-sort
        rows.sort(key=lambda r: r[:3])
        half = len(rows) // 2
        if half <= 0:
            return rows[0][3]
        return rows[next(self._which_worst) % half][3]

    def snapshot(self, brokers: Iterable[str] = ()) -> list[BrokerState]:
        """Every broker seen (plus ``brokers``), with its latency and remaining back-off."""
        now = self._clock()
        names = sorted(set(self._items) | set(brokers))
        out = []
        for name in names:
            item = self._items.get(name)
            if item is None or now >= item.available_at:
                out.append(BrokerState(name, item.latency_ms if item else 0.0, 0.0, "available"))
            else:
                state = "isolated" if item.failed else "backoff"
                out.append(BrokerState(name, item.latency_ms, item.available_at - now, state))
        return out
