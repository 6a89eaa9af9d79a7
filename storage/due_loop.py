"""DueLoop: the seeking half of the due-queue engine that the retry replay loop and the delay scheduler
share.

One seek task reads due keys (iterate upper bound = now) from a cursor that starts at the queue's
persisted floor, so a restart replays overdue keys first. Between passes it sleeps until the earliest
due key, never on a fixed tick; a key committed below the cursor moves the cursor back, and one due
earlier than the sleep wakes it. What a pass does with the due keys (deliver, publish) is the
subclass's ``_run``; ``_busy`` says whether work it handed out is still in progress (for idleness).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from .due_queue import DueQueue
from .errors import StorageError
from .keys import parse_due
from .tasks import stop_task

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")

MAX_IDLE_S = 30.0  # longest sleep: a wall-clock step forward is noticed within this
READ_RETRY_S = 1.0  # after a failed read the seek task tries again after this, then twice as long


def observe(hook: Callable[..., object] | None, value: object, name: str, *more: object) -> None:
    """Tell an observer ``hook`` (metrics, a caller's bookkeeping) about ``value`` (and ``more``), if there
    is one: its failure is logged and never reaches the loop that called it."""
    if hook is not None:
        try:
            hook(value, *more)
        except Exception:
            log.exception("%s hook failed", name)


class DueLoop:
    """A seek task over ``queue``, sleeping on the injected ``sleep``; ``name`` is for logs and tasks."""

    def __init__(
        self, queue: DueQueue, name: str, sleep: Sleep, *, read_retry_s: float = READ_RETRY_S
    ) -> None:
        self._due_queue = queue
        self._name = name
        self._sleep = sleep
        self._cursor = b""  # _start_seek() moves it to the queue's floor
        self._wake = asyncio.Event()
        self._waiting = False  # in _wait_until: a key due before _sleep_until_ms wakes it
        self._sleep_until_ms: int | None = None
        self._idle = asyncio.Event()
        self._seek_task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None
        self._read_retry_s = read_retry_s
        self._read_pause_s = read_retry_s  # doubles per failed pass, up to MAX_IDLE_S
        self._read_failing = False  # a pass failed and none has read to its end since

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self, grace_s: float = 0.0) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # --- the seek task ------------------------------------------------------------------------------
    def _run(self) -> Coroutine[Any, Any, None]:
        raise NotImplementedError

    def _busy(self) -> bool:
        """Whether work handed out by the loop is still in progress (it is not idle then)."""
        raise NotImplementedError

    def _start_seek(self) -> None:
        # R6: start at the oldest live key, not at "now": the persisted floor is at or below it, so the
        # first seek does not cross the tombstones of everything finished before a restart.
        self._cursor = self._due_queue.floor
        self._due_queue.add_listener(self._on_new_key)
        self._seek_task = asyncio.create_task(self._seek(), name=f"{self._name}-seek")
        self._seek_task.add_done_callback(self._on_seek_done)

    async def _seek(self) -> None:
        """Run the subclass's passes; a read of the store that fails (an EIO in an SST file, a corrupt
        block: StorageError) pauses them and starts them again, with a back-off. A dead seek task hands
        nothing more out until a restart while the intake still answers 2xx, so a transient read error
        must not end it. Anything else is a bug: it ends the task (logged, ``failure``)."""
        while True:
            try:
                await self._run()
                return
            except StorageError as exc:
                if not self._read_failing:  # once per outage, however many passes fail
                    self._read_failing = True
                    log.error("%s store cannot be read, seek loop paused until it can: %s", self._name, exc)
                else:
                    log.debug("%s store still cannot be read: %s", self._name, exc)
            # The injected sleep, not _wait_until: a new key must not bring the next failing read sooner
            # (a spool a millisecond would make one), and wait_idle does not take a failing loop for idle.
            await self._sleep(self._read_pause_s)
            self._read_pause_s = min(self._read_pause_s * 2, MAX_IDLE_S)

    def _read_ok(self) -> None:
        """A pass read the store to its end: reads work (again)."""
        if self._read_failing:
            self._read_failing = False
            log.warning("%s store can be read again, seek loop resumed", self._name)
        self._read_pause_s = self._read_retry_s

    async def _stop_seek(self) -> None:
        self._due_queue.remove_listener(self._on_new_key)
        await stop_task(self._seek_task)

    def _on_seek_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
            log.error("%s seek loop died; nothing more is handed out", self._name, exc_info=self.failure)
        self._idle.set()  # wake wait_idle callers so they see the failure

    # --- waking -------------------------------------------------------------------------------------
    def _on_new_key(self, key: bytes) -> None:
        """A key was committed or given back: a key behind the cursor (same millisecond, a redrive, a
        rewind) moves the cursor back, and one due before the current sleep ends it."""
        self._cursor = min(self._cursor, key)
        try:
            due: int | None = parse_due(key)
        except ValueError:
            due = None  # not a due key: seek anyway, the pass deals with it
        self._wake_for(due)

    def _wake_for(self, due_ms: int | None) -> None:
        """End the current sleep if it lasts past ``due_ms`` (None: in any case)."""
        if self._waiting and (
            self._sleep_until_ms is None or due_ms is None or due_ms < self._sleep_until_ms
        ):
            self._wake.set()

    def _next_due_ms(self) -> int | None:
        """The due time of the first key at or after the cursor, or None if there is none."""
        following = self._due_queue.first(self._cursor)
        self._read_ok()  # the end of a pass: its reads, and this one, worked
        if following is None:
            return None
        try:
            return parse_due(following)
        except ValueError:
            # Only this process writes these keys, so this is damage: do not spin on it. Passes every
            # MAX_IDLE_S still hand it out once it sorts below the due bound.
            log.error("unparseable key %r in the %s queue", following, self._name)
            return None

    async def _wait_until(self, due_ms: int | None, now: int) -> None:
        """Sleep until ``due_ms`` (queue clock), an earlier key, or at most MAX_IDLE_S."""
        timeout = MAX_IDLE_S if due_ms is None else min(max(due_ms - now, 0) / 1000, MAX_IDLE_S)
        self._wake.clear()
        self._sleep_until_ms = due_ms
        self._waiting = True
        self._maybe_idle()
        try:
            await self._race(self._wake, timeout)
        finally:
            self._waiting = False

    async def _race(self, event: asyncio.Event, timeout_s: float) -> None:
        """Wait for ``event`` or for ``timeout_s`` on the injected sleep, whichever comes first."""
        if event.is_set():
            return
        waiter = asyncio.create_task(event.wait())
        sleeper = asyncio.ensure_future(self._sleep(timeout_s))
        # A sleep that ran out sets the event at once, so the loop is not taken for idle between the
        # end of the sleep and the moment this task resumes (it has a pass to make).
        sleeper.add_done_callback(lambda done: None if done.cancelled() else event.set())
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            sleeper.cancel()

    # --- idleness -----------------------------------------------------------------------------------
    async def wait_idle(self) -> None:
        """Return once nothing handed out is in progress and nothing in the queue is due (tests, drain).

        Raises:
            RuntimeError: the seek loop died (its exception is the cause).
        """
        while not self._is_idle():
            if self.failure is not None:
                raise RuntimeError(f"the {self._name} seek loop died") from self.failure
            self._idle.clear()
            await self._idle.wait()

    def _is_idle(self) -> bool:
        return (
            self.failure is None
            and self._waiting
            and not self._wake.is_set()
            and not self._busy()
            and (self._sleep_until_ms is None or self._sleep_until_ms > self._due_queue.now_ms())
        )

    def _maybe_idle(self) -> None:
        if self._is_idle():
            self._idle.set()
