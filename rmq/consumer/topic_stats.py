"""Per-topic pull and consume rates, as Java's ConsumerStatsManager keeps them for ConsumerRunningInfo's
``statusTable`` (what ``mqadmin consumerStatus -g GROUP -i CLIENT`` prints under "#Consumer RT&TPS#" and
the Dashboard shows for a client): pull RT and TPS, consume RT, OK and failed TPS over the last minute,
failed messages over the last hour. Topics are the queues' own (a group's %RETRY% topic apart), as Java's.

Java samples each counter every 10 s (seven kept: a minute) and every 10 min (seven: an hour) on a timer;
here a snapshot is taken when a pull (every queue pulls at least once a long-poll, busy or not) or a read
comes at least that long after the last one, so no timer is needed. A rate is the change since the
oldest snapshot kept over the time since it: about the last minute (hour) when the consumer is busy, a
longer span after a quiet one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MINUTE_STEP_S, HOUR_STEP_S, KEPT = 10.0, 600.0, 7  # StatsItem's csListMinute and csListHour

# The counters of one topic, in this order: pulls, their summed RT (ms), messages pulled; listener
# calls, their summed RT (ms); messages consumed OK, messages failed.
PULLS, PULL_MS, PULLED, CALLS, CALL_MS, OK, FAILED = range(7)


@dataclass
class _Topic:
    counts: list[float] = field(default_factory=lambda: [0.0] * 7)
    minute: deque[tuple[float, tuple[float, ...]]] = field(default_factory=lambda: deque(maxlen=KEPT))
    hour: deque[tuple[float, tuple[float, ...]]] = field(default_factory=lambda: deque(maxlen=KEPT))

    def sample(self, now: float) -> None:
        for kept, step in ((self.minute, MINUTE_STEP_S), (self.hour, HOUR_STEP_S)):
            if not kept or now - kept[-1][0] >= step:
                kept.append((now, tuple(self.counts)))


def _change(
    kept: deque[tuple[float, tuple[float, ...]]], now: float, counts: list[float]
) -> tuple[float, tuple[float, ...]]:
    """Seconds since the oldest snapshot kept, and each counter's change since."""
    t0, first = kept[0]
    return now - t0, tuple(b - a for a, b in zip(first, counts, strict=True))


def _per_second(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


def _mean(total: float, times: float) -> float:
    return total / times if times > 0 else 0.0


class TopicStats:
    """``clock`` is monotonic seconds (the consumer's loop time)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._topics: dict[str, _Topic] = {}

    def _topic(self, topic: str) -> _Topic:
        got = self._topics.get(topic)
        if got is None:
            got = self._topics[topic] = _Topic()
            got.sample(self._clock())  # the zero every rate starts from
        return got

    def pulled(self, topic: str, messages: int, took_s: float) -> None:
        """A pull of the topic came back with ``messages`` (0: none found, which only takes a snapshot
        when one is due: every queue pulls at least every long-poll, so snapshots need no timer)."""
        t = self._topic(topic)
        if messages:
            c = t.counts
            c[PULLS] += 1
            c[PULL_MS] += took_s * 1000
            c[PULLED] += messages
        t.sample(self._clock())

    def consumed(self, topic: str, ok: int, failed: int, took_s: float) -> None:
        """A listener call on the topic's messages ended (per message: no snapshot taken here)."""
        c = (self._topics.get(topic) or self._topic(topic)).counts
        c[CALLS] += 1
        c[CALL_MS] += took_s * 1000
        c[OK] += ok
        c[FAILED] += failed

    def forget(self, keep: set[str]) -> None:
        """Drop the topics not in ``keep`` (unsubscribed)."""
        for topic in [t for t in self._topics if t not in keep]:
            del self._topics[topic]

    def status(self, topic: str) -> dict[str, Any]:
        """ConsumeStatus of ``topic`` as fastjson writes it (fields in alphabetical order)."""
        t, now = self._topic(topic), self._clock()
        t.sample(now)
        seconds, d = _change(t.minute, now, t.counts)
        _, h = _change(t.hour, now, t.counts)
        consume_rt = _mean(d[CALL_MS], d[CALLS]) if d[CALLS] else _mean(h[CALL_MS], h[CALLS])
        return {
            "consumeFailedMsgs": int(h[FAILED]),
            "consumeFailedTPS": _per_second(d[FAILED], seconds),
            "consumeOKTPS": _per_second(d[OK], seconds),
            "consumeRT": consume_rt,
            "pullRT": _mean(d[PULL_MS], d[PULLS]),
            "pullTPS": _per_second(d[PULLED], seconds),
        }
