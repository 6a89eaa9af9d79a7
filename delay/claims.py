"""Claims: which due keys are owned right now by the scheduler (publishing them) or by a cancel
(deleting them), so the two never act on the same message at once.

Claims live in memory only: after a restart nothing is being published or cancelled.
"""

from __future__ import annotations

import asyncio


class _Claim:
    __slots__ = ("published", "waiters")

    def __init__(self) -> None:
        self.published = False  # the publish succeeded; the store may not have recorded it yet
        self.waiters: list[asyncio.Future[bool]] = []


class Claims:
    """One owner per key; others may wait to learn whether the owner published it."""

    def __init__(self) -> None:
        self._owned: dict[bytes, _Claim] = {}

    def __contains__(self, key: bytes) -> bool:
        return key in self._owned

    def __len__(self) -> int:
        return len(self._owned)

    def take(self, key: bytes) -> bool:
        """Claim ``key``; False if someone else holds it."""
        if key in self._owned:
            return False
        self._owned[key] = _Claim()
        return True

    def is_published(self, key: bytes) -> bool:
        claim = self._owned.get(key)
        return claim is not None and claim.published

    def lowest(self) -> bytes | None:
        return min(self._owned) if self._owned else None

    async def wait(self, key: bytes) -> bool:
        """Wait for the owner of ``key`` to let go; True if it published the message."""
        claim = self._owned.get(key)
        if claim is None:
            return False
        if claim.published:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        claim.waiters.append(future)
        return await future

    def mark_published(self, keys: list[bytes]) -> None:
        """The messages under ``keys`` were published; the claims stay until the store records it."""
        for key in keys:
            claim = self._owned[key]
            claim.published = True
            self._wake(claim, True)

    def release(self, keys: list[bytes]) -> None:
        for key in keys:
            claim = self._owned.pop(key, None)
            if claim is not None:
                self._wake(claim, claim.published)

    @staticmethod
    def _wake(claim: _Claim, published: bool) -> None:
        for future in claim.waiters:
            if not future.done():
                future.set_result(published)
        claim.waiters.clear()
