"""Which latency observations carry an exemplar: the trace of one message, shown beside the histogram's
bucket it fell in (OpenMetrics; Prometheus keeps them with ``--enable-feature=exemplar-storage`` and
Grafana links a slow bucket to its trace).

An observation takes one when its message has a valid, sampled W3C trace context (an unsampled trace
was recorded nowhere: nothing to link to) and its series' bucket has had none for ``every_s``. A scrape
shows each bucket's newest exemplar only, so more than one a bucket a second would be work nobody sees:
the check a message pays is a bisect, a dict read and a clock read, the parse only when one is taken.
The trace context comes from any producer (a consumed message's properties): it is parsed, never trusted.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Sequence

from .tracing.context import parse_traceparent

EVERY_S = 1.0
MAX_SERIES = 1024  # series are subscription names from the configuration; bounded all the same


class Exemplars:
    def __init__(
        self,
        bounds: Sequence[float],
        *,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bounds = tuple(bounds)
        self._every_s = every_s
        self._clock = clock
        self._next: dict[tuple[str, int], float] = {}  # (series, bucket) -> when it may take one again

    def take(self, series: str, seconds: float, traceparent: str | None) -> dict[str, str] | None:
        """The exemplar labels (trace_id, span_id) for an observation of ``seconds`` in ``series`` of a
        message whose traceparent property is ``traceparent``, or None."""
        if traceparent is None:
            return None
        return self.take_at(series, bisect_left(self._bounds, seconds), traceparent)

    def take_at(self, series: str, bucket: int, traceparent: str) -> dict[str, str] | None:
        """``take`` for an observation whose bucket (the histogram's index, bisect_left of its bounds) the
        caller found already."""
        key = (series, bucket)
        now = self._clock()
        due = self._next.get(key)
        if due is not None and now < due:
            return None
        parent = parse_traceparent(traceparent)
        if parent is None or not int(parent[54], 16) & 1:  # invalid, or not sampled
            return None
        if due is None and len(self._next) >= MAX_SERIES * (len(self._bounds) + 1):
            return None
        self._next[key] = now + self._every_s
        return {"trace_id": parent[3:35], "span_id": parent[36:52]}
