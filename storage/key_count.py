"""KeyCount: a column family's live-key count that costs no scan at open.

A store's pending gauge used to be a full key count in its constructor: seconds with 10 M pending
(bench/scale.py), on the critical path of every start. Now a column family that RocksDB estimates
(a property read) at more than SYNC_COUNT_LIMIT keys starts from that estimate, and one exact count
runs in a background thread; its result, plus whatever the owner added or removed meanwhile, replaces
the estimate once it is done. Smaller ones are counted at once, as before (milliseconds).
"""

from __future__ import annotations

import logging
import threading

from .errors import StorageError
from .kv import KV

log = logging.getLogger(__name__)

SYNC_COUNT_LIMIT = 100_000  # ~50 ms of counting on the project's machine


class KeyCount:
    """The number of keys in ``cf`` of ``kv``; ``add`` is called with every change the owner makes.

    Exact (``exact``) once the background count is done, up to writes made between the constructor and
    the moment that count's iterator was created (none in practice: the owner has not started yet).
    """

    def __init__(self, kv: KV, cf: str) -> None:
        self._lock = threading.Lock()
        self._changed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        estimate = kv.approximate_count(cf)
        self.exact = estimate <= SYNC_COUNT_LIMIT
        if self.exact:
            self._value = kv.count(cf)
            return
        self._value = estimate
        self._thread = threading.Thread(target=self._count, args=(kv, cf), name=f"count-{cf}", daemon=True)
        self._thread.start()

    @property
    def value(self) -> int:
        return self._value

    def add(self, delta: int) -> None:
        with self._lock:
            self._value += delta
            self._changed += delta

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the background count to end (tests, benchmarks); whether it has."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.exact

    def close(self) -> None:
        """Stop the background count (before the KV is closed under it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _count(self, kv: KV, cf: str) -> None:
        try:
            counted = kv.count(cf, stop=self._stop)
        except StorageError as exc:
            if not self._stop.is_set():
                log.warning("counting %s failed, its gauge stays an estimate: %s", cf, exc)
            return
        with self._lock:
            self._value = counted + self._changed
            self.exact = True
