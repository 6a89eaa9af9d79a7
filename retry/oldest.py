"""OldestPending: when the oldest pending message of the retry store first failed, kept in memory.

The retry store's keys sort by due time, not by age: the next message due is often the newest failure
(a fresh failure is due after the first rung, an old one after its tenth), so reading the next-due
record's first failure dropped the oldest-age gauge to ~0 at every new failure. This keeps instead a
count of pending messages per second of "since" (a record's first failure; its creation when it was
spooled without one, ``ack=spool``) and the smallest exact time added to each second, so the oldest
is the smallest second still holding a message: a heap of seconds with lazy deletion.

Memory is one entry per second in which a pending message first failed (a day-long outage: 86 400),
never one per message. The answer is exact while the first message added to its second is still
pending; otherwise it is that first one's time: never later than the oldest pending message's, and less
than a second earlier.

Built at open from one scan of the pending column family (the key count's rule, storage.key_count:
at once for a small store, in a background thread for a large one, the scan's snapshot merged with
whatever the store added and removed meanwhile); until a background scan is done, ``oldest`` answers
from the changes made since the open only and ``exact`` is False.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Iterable

from rocksidecar.storage.background_scan import BackgroundScan

from .record import CorruptRecordError, RetryRecord, decode_record

log = logging.getLogger(__name__)

SYNC_SCAN_LIMIT = 10_000  # pending records decoded at open before the store answers (~30 ms)
SCAN_CHUNK = 256  # records a background scan decodes between two pauses (the key count's rule)
SCAN_PAUSE_S = 0.001


def since_ms(record: RetryRecord) -> int:
    """When ``record`` started waiting: its first failure, else its creation (spooled on purpose); 0 for
    neither (not tracked)."""
    return record.first_failure_ms or record.created_ms


def since_of(raw: bytes) -> int:
    """``since_ms`` of a stored value; 0 for one that does not decode (never tracked either)."""
    try:
        return since_ms(decode_record(raw))
    except CorruptRecordError:
        return 0


class OldestPending(BackgroundScan):
    """Counts of pending messages per second of their ``since_ms``; ``add``/``remove`` are told every
    record the store writes or deletes (the same ``since_ms`` both times)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._seconds: dict[int, list[int]] = {}  # second -> [count, smallest since_ms added]
        self._heap: list[int] = []  # seconds, lazily deleted (a second gone from _seconds is skipped)

    # --- building at open --------------------------------------------------------------------------
    def load(self, values: Iterable[bytes]) -> None:
        """Count ``values`` (the pending column family's, before any change) now."""
        self._merge(_tally(values, None))

    def load_in_background(self, values: Iterable[bytes]) -> None:
        """Count ``values`` (an iterator over a snapshot: changes after it are told to add/remove) in a
        thread; not ``exact`` until it is done."""
        self._start_scan(self._scan, values, name="retry-oldest")

    def _scan(self, values: Iterable[bytes]) -> None:
        try:
            tally = _tally(values, self._stop)
        except Exception as exc:  # a storage error, or stopped: the answer stays what changes tell
            if not self._stop.is_set():
                log.warning("scanning the retry store for its oldest message failed: %s", exc)
            return
        if tally is not None:
            self._merge(tally)

    def _merge(self, tally: dict[int, list[int]]) -> None:
        with self._lock:
            for second, (count, low) in tally.items():
                self._tell(second, count, low)
            self.exact = True

    # --- changes -----------------------------------------------------------------------------------
    def add(self, since: int) -> None:
        if since > 0:
            with self._lock:
                self._tell(since // 1000, 1, since)

    def remove(self, since: int) -> None:
        if since > 0:
            with self._lock:
                self._tell(since // 1000, -1, since)

    def _tell(self, second: int, n: int, since: int) -> None:
        """Add ``n`` to ``second``'s count (negative: removals; under the lock). Before a background scan
        is merged a removal may come first: its second holds -1 until the scan's count arrives, and is on
        the heap from then on like any other (a second merged later must not be missing from it)."""
        entry = self._seconds.get(second)
        if entry is None:
            self._seconds[second] = [n, since]
            heapq.heappush(self._heap, second)
            self._compact()
            return
        entry[0] += n
        if n > 0:
            entry[1] = min(entry[1], since)
        if entry[0] == 0:
            del self._seconds[second]

    def _compact(self) -> None:
        """Seconds emptied and filled again leave entries behind on the heap: past twice the live ones,
        it is rebuilt (under the lock), so that it stays bounded by them whoever reads it, or nobody."""
        if len(self._heap) > 2 * len(self._seconds) + 64:
            self._heap[:] = list(self._seconds)
            heapq.heapify(self._heap)

    # --- the answer --------------------------------------------------------------------------------
    def oldest(self) -> int | None:
        """The smallest ``since_ms`` of a pending message (to the second's first time added), or None."""
        with self._lock:
            self._compact()
            heap, seconds = self._heap, self._seconds
            while heap:
                entry = seconds.get(heap[0])
                if entry is not None and entry[0] > 0:
                    return entry[1]
                if entry is None:
                    heapq.heappop(heap)
                    continue
                # a second holding only removals told before the background scan: skip it for now
                return _smallest_positive(seconds)
            return None


def _smallest_positive(seconds: dict[int, list[int]]) -> int | None:
    live = [entry[1] for second, entry in seconds.items() if entry[0] > 0]
    return min(live) if live else None


def _tally(values: Iterable[bytes], stop: threading.Event | None) -> dict[int, list[int]]:
    tally: dict[int, list[int]] = {}
    for n, raw in enumerate(values, 1):
        since = since_of(raw)
        if since > 0:
            entry = tally.get(since // 1000)
            if entry is None:
                tally[since // 1000] = [1, since]
            else:
                entry[0] += 1
                entry[1] = min(entry[1], since)
        # beside the event loop the scan holds the GIL: it pauses now and then, as the key count does
        if stop is not None and n % SCAN_CHUNK == 0 and stop.wait(SCAN_PAUSE_S):
            raise RuntimeError("scan stopped")
    return tally
