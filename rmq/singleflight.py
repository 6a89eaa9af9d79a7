"""One in-flight call per key: callers asking for a key while its call runs share that call's outcome
(one connect per address in the pool, one route request per topic in the producer's routes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Settled = Callable[[K, asyncio.Future[V]], None]


class SingleFlight(Generic[K, V]):
    """The shared call runs as its own task: a waiter that is cancelled leaves it running for the
    others; only ``cancel_all`` stops it. ``settled(key, future)``, if given, runs when a call ends
    (done, failed or cancelled), after the key is free again and before any waiter resumes."""

    def __init__(self, settled: Settled[K, V] | None = None) -> None:
        self._calls: dict[K, asyncio.Future[V]] = {}
        self._settled = settled

    async def run(self, key: K, call: Callable[[], Coroutine[Any, Any, V]]) -> V:
        """The outcome of ``call()``, or of the call already running for ``key`` (then ``call`` is not
        called)."""
        fut = self._calls.get(key)
        if fut is None:
            fut = asyncio.ensure_future(call())
            self._calls[key] = fut
            fut.add_done_callback(lambda f: self._done(key, f))
        return await asyncio.shield(fut)

    def _done(self, key: K, fut: asyncio.Future[V]) -> None:
        self._calls.pop(key, None)
        if not fut.cancelled():
            fut.exception()  # seen by the waiters; never "exception was never retrieved" if none is left
        if self._settled is not None:
            self._settled(key, fut)

    def cancel_all(self) -> None:
        for fut in list(self._calls.values()):
            fut.cancel()
