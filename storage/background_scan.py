"""BackgroundScan: one pass over a store's column family at open, run in a daemon thread so that a large
store does not hold up the start (storage.key_count, retry.oldest). ``exact`` says whether its result is
in; the owner's changes made meanwhile are merged with it by the subclass."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class BackgroundScan:
    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.exact = True

    def _start_scan(self, target: Callable[..., None], *args: Any, name: str) -> None:
        """Run ``target(*args)`` in a thread; not ``exact`` until it sets it."""
        self.exact = False
        self._thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._thread.start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the background scan to end (tests, benchmarks); whether it has."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.exact

    def close(self) -> None:
        """Stop the background scan (before the KV is closed under it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
