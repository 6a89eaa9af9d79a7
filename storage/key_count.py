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

from .background_scan import BackgroundScan
from .errors import StorageError
from .kv import KV

log = logging.getLogger(__name__)

SYNC_COUNT_LIMIT = 100_000  # ~50 ms of counting on the project's machine


class KeyCount(BackgroundScan):
    """The number of keys in ``cf`` of ``kv``; ``add`` is called with every change the owner makes.

    Exact (``exact``) once the background count is done, up to writes made between the constructor and
    the moment that count's iterator was created (none in practice: the owner has not started yet).
    """

    def __init__(self, kv: KV, cf: str) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._changed = 0
        estimate = kv.approximate_count(cf)
        if estimate <= SYNC_COUNT_LIMIT:
            self._value = kv.count(cf)
            return
        self._value = estimate
        self._start_scan(self._count, kv, cf, name=f"count-{cf}")

    @property
    def value(self) -> int:
        return self._value

    def add(self, delta: int) -> None:
        with self._lock:
            self._value += delta
            self._changed += delta

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
