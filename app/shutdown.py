"""How a process starts and stops around SIGTERM, and the one order in which it closes what it delivers
with, below its edges (the sidecar and `rocksidecar dmq` own the same parts)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn, Protocol

log = logging.getLogger("rocksidecar")
# After a stop that overran: how long closing the store may take (RocksDB recovers from its WAL if not).
CLOSE_STORE_S = 5.0


class _Closes(Protocol):
    async def close(self) -> None: ...


class _ClosesNow(Protocol):
    def close(self) -> None: ...


async def close_delivery(
    producer: _Closes,
    client: _Closes,
    remoting: _Closes,
    retry: _Closes,
    delay: _Closes,
    writer: _Closes,
    kv: _ClosesNow,
) -> None:
    """The producer before the client instance and the connections it sends over; then the stores."""
    await producer.close()
    await client.close()
    await remoting.close()
    await close_stores(retry, delay, writer, kv)


async def close_stores(
    retry: _Closes, delay: _Closes, writer: _Closes, kv: _ClosesNow, *, anyway: bool = False
) -> None:
    """The stores before the group-commit writer that writes their batches; RocksDB last, once nothing
    writes to it. ``anyway``: after a stop cut short anywhere (some of them may be closed already, or
    half), each step is tried whatever the one before did, and RocksDB is closed in any case (its
    memtables flushed, its LOCK released)."""
    for step in (retry.close, delay.close, writer.close):
        try:
            await step()
        except Exception as exc:  # already closed, or failing: the next steps still run
            if not anyway:
                raise
            log.warning("closing the store: %s failed: %s", step.__qualname__, exc)
    kv.close()


async def start_unless_stopped(start: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run a process's start-up until it ends or ``stop`` is set (SIGTERM), whichever comes first: True
    when it started; False when it was stopped first, the start-up cancelled wherever it was (the caller
    then runs its stop(), which copes with parts never started). A start-up that failed raises here."""
    starting = asyncio.ensure_future(start)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((starting, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not starting.done():  # SIGTERM first (or this task was cancelled): cut the start-up short
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
    if starting.cancelled():
        return False
    starting.result()
    return True


def exit_now(code: int = 1) -> NoReturn:
    """Leave at once, the logs flushed: not waiting for threads, as the loop's shutdown and the
    interpreter's exit do (a store write stuck in a thread on a hung disk would hold them for ever)."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(code)


async def stop_within(
    stop: Coroutine[Any, Any, None],
    limit_s: float,
    close_store: Callable[[], Awaitable[None]],
    stuck: Callable[[], None] = lambda: None,
) -> bool:
    """Run a process's stop(), for ``limit_s`` at most: True when it finished. When it overran, it is
    cancelled where it was, one line says so, and ``close_store`` closes what must be closed for the
    writes acknowledged to be on disk (the caller exits non-zero). Should that overrun CLOSE_STORE_S too,
    ``stuck()`` (a process: exit_now, whose threads may be held by the disk)."""
    try:
        await asyncio.wait_for(stop, limit_s)
    except TimeoutError:
        log.error(
            "stopping took more than %.0f s: cut short, closing the store (what was not finished is "
            "redelivered or replayed after the next start)",
            limit_s,
            extra={"event": "stop_overran", "limit_s": limit_s},
        )
        try:  # bounded too: a disk that hung the stop may hang this (then the exit 1 is all there is)
            await asyncio.wait_for(close_store(), CLOSE_STORE_S)
        except TimeoutError:
            log.error("closing the store took more than %.0f s: left as it is", CLOSE_STORE_S)
            stuck()
        return False
    return True
