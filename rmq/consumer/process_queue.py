"""ProcessQueue: the messages of one message queue that were pulled and are not yet consumed.

The committed offset is a sliding window: the lowest offset still in flight, so a slow or failing message
holds the offset back however many later messages finish (a restart re-delivers it rather than losing it).
With nothing in flight it is the next offset to pull. Cached count and size feed flow control; once the
queue is dropped (rebalanced away, or closing) nothing new is put and its offset is no longer persisted.
Single-threaded by design: the consumer's tasks all run on one event loop.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Sequence

from ..message import MessageExt


class ProcessQueue:
    def __init__(self, next_offset: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._msgs: dict[int, MessageExt] = {}
        self._heap: list[int] = []  # offsets; entries no longer in _msgs are skipped lazily
        self._taken: set[int] = set()  # orderly mode: handed to the listener, still in flight
        # concurrent mode: offset -> the copy of a cached message consumed here again (consumed_again)
        self._again: dict[int, MessageExt] = {}
        self._next_offset = next_offset  # where the next pull starts: the commit point when idle
        self._size = 0
        # offsets put in ascending order (pulls move forward), so the dict's last key is its highest
        # and ``span`` needs no max() over the cache per pull; an offset below one already put (not
        # seen from a broker) turns this off until the cache empties
        self._last_put = -1
        self._ascending = True
        self._clock = clock
        self.dropped = False
        self.locked = False  # orderly mode: this client holds the broker's lock on the queue
        self.last_lock_at = 0.0
        self.last_pull_at = clock()
        self.last_consume_at = clock()

    # pulled messages in ------------------------------------------------------------------------
    def put(self, messages: Iterable[MessageExt], next_offset: int) -> int:
        """Cache a pulled batch and move the pull position to the broker's ``nextBeginOffset`` (past
        messages the tag filter skipped). Returns how many messages were new."""
        added = 0
        if self.dropped:
            return 0
        msgs, heap = self._msgs, self._heap
        if not msgs:  # an empty cache is ascending whatever came before
            self._ascending, self._last_put = True, -1
        for msg in messages:
            offset = msg.queue_offset
            if offset in msgs:
                continue
            if offset < self._last_put:
                self._ascending = False
            self._last_put = offset
            msgs[offset] = msg
            heapq.heappush(heap, offset)
            self._size += len(msg.body)
            added += 1
        self._next_offset = max(self._next_offset, next_offset)
        self.last_pull_at = self._clock()
        return added

    def cached(self, messages: Iterable[MessageExt]) -> list[MessageExt]:
        """Those of ``messages`` that are the cached ones (what ``put`` took of them), each once: a
        repeated offset, or one cached before, is left out."""
        msgs = self._msgs
        return list({m.queue_offset: m for m in messages if msgs.get(m.queue_offset) is m}.values())

    def consumed_again(self, copies: Iterable[MessageExt]) -> None:
        """Concurrent mode, a send-back failed: these copies of cached messages (reconsume_times + 1, for
        the listener) are consumed here again; ``held`` takes them for the cached ones. The cache keeps
        the message as pulled: its count is the broker's, which decides on the DLQ at the next send-back."""
        for msg in copies:
            if msg.queue_offset in self._msgs:
                self._again[msg.queue_offset] = msg

    def held(self, msg: MessageExt) -> MessageExt | None:
        """The cached message (as pulled) that ``msg`` is: itself, or its copy consumed here again; None
        for any other (not cached, or another decoding of it: an operator's resend of it)."""
        offset = msg.queue_offset
        cached = self._msgs.get(offset)
        if cached is msg or (cached is not None and self._again.get(offset) is msg):
            return cached
        return None

    # consumed messages out ---------------------------------------------------------------------
    def remove(self, offsets: Iterable[int]) -> int:
        """Forget consumed messages; returns the offset that may now be committed."""
        for offset in offsets:
            msg = self._msgs.pop(offset, None)
            if msg is not None:
                if self._again:  # a failed send-back's copies only: nothing on the usual path
                    self._again.pop(offset, None)
                self._size -= len(msg.body)
                self._taken.discard(offset)
        self.last_consume_at = self._clock()
        return self.committed_offset()

    def committed_offset(self) -> int:
        """The lowest offset still in flight, or the next offset to pull when none is."""
        heap = self._heap
        while heap and heap[0] not in self._msgs:
            heapq.heappop(heap)
        return heap[0] if heap else self._next_offset

    # orderly mode ------------------------------------------------------------------------------
    def take(self, limit: int, *, below: int | None = None) -> list[MessageExt]:
        """The next ``limit`` messages in offset order that no listener holds yet (only offsets below
        ``below``, the commit window's limit, when given)."""
        out: list[MessageExt] = []
        for offset in sorted(o for o in self._msgs if o not in self._taken):
            if len(out) >= limit or (below is not None and offset >= below):
                break
            self._taken.add(offset)
            out.append(self._msgs[offset])
        return out

    def give_back(self, messages: Sequence[MessageExt]) -> None:
        """Orderly consumption failed: these (with their reconsume count updated) are taken again, first,
        by the next ``take``."""
        for msg in messages:
            self._taken.discard(msg.queue_offset)
            if msg.queue_offset in self._msgs:
                self._msgs[msg.queue_offset] = msg

    # state -------------------------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def count(self) -> int:
        return len(self._msgs)

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def span(self) -> int:
        """Max minus min cached offset: a wide span means an old message is stuck (flow control)."""
        if not self._msgs:
            return 0
        highest = next(reversed(self._msgs)) if self._ascending else max(self._msgs)
        return highest - self.committed_offset()

    def messages(self) -> list[MessageExt]:
        return [self._msgs[o] for o in sorted(self._msgs)]

    def drop(self) -> None:
        self.dropped = True
