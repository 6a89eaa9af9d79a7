"""What the push consumer keeps per owned message queue, and the host interface its services use."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..codes import MASTER_ID
from ..message import MessageExt, MessageQueue
from .commit_window import QueueWindow
from .config import ConsumerConfig, ConsumeStatus, MessageListener
from .offset_store import OffsetStore
from .process_queue import ProcessQueue
from .stats import Stats

log = logging.getLogger(__name__)


@dataclass(eq=False)
class QueueState:
    mq: MessageQueue
    pq: ProcessQueue
    # Events instead of polling: ``room`` wakes the pull loop paused by flow control (consumption made
    # room, or the queue was dropped); ``ready`` wakes the orderly loop (messages arrived, the lock was
    # renewed, or the queue was dropped). Separate, so that one loop clearing its event never swallows
    # the other's wake-up.
    room: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    consuming: int = 0  # listener calls running for this queue
    pull_task: asyncio.Task[None] | None = None
    window: QueueWindow = field(default_factory=lambda: QueueWindow(0, 0))  # off unless configured
    undecodable_seen: int = -1  # the highest offset of an undecodable message logged and counted
    # The broker node the next pull goes to: the last pull answer's suggestWhichBrokerId (Java's
    # pullFromWhichNodeTable), the master at first.
    pull_from: int = MASTER_ID

    def poke(self) -> None:
        self.room.set()
        self.ready.set()


class ConsumeHost(Protocol):
    """The push consumer, as the consume services see it."""

    config: ConsumerConfig
    listener: MessageListener
    offsets: OffsetStore
    stats: Stats

    @property
    def closing(self) -> bool: ...

    def spawn(self, state: QueueState, coro: Coroutine[Any, Any, None]) -> None: ...

    def count_consumed(self, mq: MessageQueue, ok: int, failed: int, took_s: float) -> None:
        """A listener call on ``mq``'s messages ended: ``ok`` and ``failed`` of them (0 and 0 for a queue
        dropped meanwhile), after ``took_s``."""

    def advanced(self, state: QueueState, committed: int) -> None:
        """The queue's committed offset moved to ``committed`` (after the offset store's update)."""

    async def send_back(self, msg: MessageExt, mq: MessageQueue, *, dead: bool = False) -> bool: ...

    async def wait_closing(self, timeout_s: float) -> bool: ...


async def call_listener(
    host: ConsumeHost, state: QueueState, batch: list[MessageExt], on_error: ConsumeStatus
) -> ConsumeStatus:
    """The app's listener on one batch, within consume_timeout_s; an exception, a timeout or an answer
    that is not a ConsumeStatus counts as ``on_error`` (Java treats a throwing listener as a failure)."""
    try:
        async with asyncio.timeout(host.config.consume_timeout_s):
            status = await host.listener(batch, state.mq)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("listener failed on %d message(s) of %s", len(batch), state.mq)
        return on_error
    return status if isinstance(status, ConsumeStatus) else on_error
