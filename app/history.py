"""The last minutes of a few numbers (store depth, messages sent and spooled, replays), sampled by the
service every few seconds, for the status page's charts. In memory only: a restart starts afresh."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from itertools import pairwise

SAMPLE_EVERY_S = 5.0
KEEP = 72  # six minutes at one sample per 5 s


class History:
    def __init__(self, keep: int = KEEP) -> None:
        self._samples: deque[tuple[float, dict[str, float]]] = deque(maxlen=keep)

    def sample(self, at_s: float, values: Mapping[str, float]) -> None:
        self._samples.append((at_s, dict(values)))

    def levels(self, name: str) -> list[tuple[float, float]]:
        """(time, value) of a level such as the store depth."""
        return [(t, v[name]) for t, v in self._samples if name in v]

    def rates(self, name: str) -> list[tuple[float, float]]:
        """(time, per second) between consecutive samples of a counter (a restart's drop counts as 0)."""
        points = self.levels(name)
        return [(t1, max(v1 - v0, 0.0) / (t1 - t0)) for (t0, v0), (t1, v1) in pairwise(points) if t1 > t0]
