"""Claims: which due keys are owned right now by a loop (delivering or publishing them) or by another
caller (a cancel deleting them), so two never act on the same message at once, and the floor never
passes a claimed key (storage.due_queue).

Claims live in memory only: after a restart nothing is in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Claims:
    """One owner per key; others may wait to learn whether the owner published it."""

    def __init__(self) -> None:
        # key -> futures of those waiting for it (None until someone waits: the usual case, kept cheap)
        self._owned: dict[bytes, list[asyncio.Future[bool]] | None] = {}
        self._published: set[bytes] = set()  # published; the store may not have recorded it yet

    def __contains__(self, key: bytes) -> bool:
        return key in self._owned

    def __len__(self) -> int:
        return len(self._owned)

    def take(self, key: bytes) -> bool:
        """Claim ``key``; False if someone else holds it."""
        if key in self._owned:
            return False
        self._owned[key] = None
        return True

    def is_published(self, key: bytes) -> bool:
        return key in self._published

    def lowest(self) -> bytes | None:
        return min(self._owned) if self._owned else None

    async def wait(self, key: bytes) -> bool:
        """Wait for the owner of ``key`` to let go; True if it published the message."""
        if key not in self._owned:
            return False
        if key in self._published:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiters = self._owned[key]
        if waiters is None:
            self._owned[key] = waiters = []
        waiters.append(future)
        return await future

    def mark_published(self, keys: Iterable[bytes]) -> None:
        """The messages under ``keys`` were published; the claims stay until the store records it."""
        for key in keys:
            self._published.add(key)
            waiters = self._owned[key]
            if waiters is not None:
                self._owned[key] = None
                _wake(waiters, True)

    def clear(self) -> None:
        """Drop every claim (a loop that stopped); waiters learn "not published"."""
        self.release(list(self._owned))

    def release(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            waiters = self._owned.pop(key, None)
            published = key in self._published
            self._published.discard(key)
            if waiters is not None:
                _wake(waiters, published)


def _wake(waiters: list[asyncio.Future[bool]], published: bool) -> None:
    for future in waiters:
        if not future.done():
            future.set_result(published)
