"""Log storms of one cause as one line, then one summary per window (the README's rule for logs).

A broker that is down makes every persist, pull and heartbeat fail every few seconds: without this,
ten seconds of outage are hundreds of identical warnings that bury the few real events. ``Throttle``
is the generic counter (the sidecar's app.logs uses it too: the client imports nothing of the project);
``RepeatLog`` writes through it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

Key = tuple[object, ...]
WINDOW_S = 10.0
MAX_CAUSES = 1024  # distinct causes held at once; past it, new ones share one key (bounded memory)


class Throttle:
    """At most one line per key per ``window_s``. A storm of one cause (a thousand spools with the same
    error) logs its first line, then one summary per window with how many lines it stood for."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._open: dict[Key, tuple[float, int]] = {}  # key -> (window start, suppressed)

    def allow(self, key: Key) -> int | None:
        """None to stay quiet; otherwise log now, and the count is how many lines were held back."""
        now = self._clock()
        started, suppressed = self._open.get(key, (None, 0))
        if started is not None and now - started < self.window_s:
            self._open[key] = (started, suppressed + 1)
            return None
        self._open[key] = (now, 0)
        return suppressed

    def __contains__(self, key: Key) -> bool:
        return key in self._open

    def __len__(self) -> int:
        return len(self._open)

    def expired(self) -> list[tuple[Key, int]]:
        """Keys whose window is over: forget them, and return those that held lines back (to summarise)."""
        now = self._clock()
        done = [(k, v) for k, v in self._open.items() if now - v[0] >= self.window_s]
        for key, _ in done:
            del self._open[key]
        return [(key, suppressed) for key, (_, suppressed) in done if suppressed]


class RepeatLog:
    """Warnings that repeat while something is down: each cause's first line at once, the rest counted
    and summarised (with the last line) once its window is over. ``flush()`` writes the summaries; it
    runs on every call and should also run every window (the consumer's timer does), so that a storm
    that stopped is still summarised."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._throttle = Throttle(window_s, clock)
        self._last: dict[Key, tuple[logging.Logger, int, str]] = {}  # the last line held back

    @property
    def window_s(self) -> float:
        return self._throttle.window_s

    def log(self, logger: logging.Logger, level: int, cause: Key, msg: str, *args: object) -> None:
        """``cause``: what makes two lines the same (the call site and its broker, not the error text,
        whose details vary from one failure to the next)."""
        self.flush()
        key = (logger.name, *cause)
        if key not in self._throttle and len(self._throttle) >= MAX_CAUSES:
            key = (logger.name, "(too many causes)")
        if self._throttle.allow(key) is None:
            if logger.isEnabledFor(level):
                self._last[key] = (logger, level, msg % args if args else msg)
            return
        logger.log(level, msg, *args)

    def warning(self, logger: logging.Logger, cause: Key, msg: str, *args: object) -> None:
        self.log(logger, logging.WARNING, cause, msg, *args)

    def flush(self) -> None:
        for key, suppressed in self._throttle.expired():
            last = self._last.pop(key, None)
            if last is not None:
                logger, level, line = last
                window = self._throttle.window_s
                logger.log(level, "%d more like this in %.0f s, the last: %s", suppressed, window, line)
