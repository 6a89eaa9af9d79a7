"""Where a consumer group's progress lives: on the brokers (clustering) or in a local file (broadcasting).

Both keep the offsets in memory, updated as messages finish (only forward, so a late small offset from a
slow message never rolls the window back) and persisted by the consumer every 5 s and on shutdown. An
offset is "the next message to consume", as in Java; None means the group never committed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Protocol

import orjson

from ..broker import BrokerApi
from ..errors import ClientError, RocketMQError
from ..message import MessageQueue
from ..throttle import RepeatLog

log = logging.getLogger(__name__)


class ReadType(enum.Enum):
    MEMORY = "memory"
    STORE = "store"
    MEMORY_THEN_STORE = "memory-then-store"


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None: ...

    async def read(self, mq: MessageQueue, read_type: ReadType) -> int | None: ...

    async def persist(self, mq: MessageQueue) -> None:
        """Java's persist, for a removed queue: the queue's offset on its way, a broker's one-way (no
        answer awaited: a slow broker holds up no rebalance, nothing says it was stored). Raises
        RocketMQError when it could not be sent (or the file not written)."""
        ...

    async def persist_acked(self, mq: MessageQueue) -> None:
        """Persist the queue's offset and wait until that is done (the broker's answer, the file
        written), for the commit window; raises RocketMQError when it is not."""
        ...

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...

    def snapshot(self) -> dict[MessageQueue, int]: ...


class _MemoryOffsets:
    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None:
        current = self._table.get(mq)
        if current is None or not increase_only or offset > current:
            self._table[mq] = offset

    def remove(self, mq: MessageQueue) -> None:
        self._table.pop(mq, None)

    def snapshot(self) -> dict[MessageQueue, int]:
        return dict(self._table)


# broker name -> the address of its offsets: the master, else (Java) any node listed
BrokerFinder = Callable[[str], Awaitable[str | None]]


class RemoteOffsetStore(_MemoryOffsets):
    """RemoteBrokerOffsetStore: QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET on the queue's broker, at
    the address ``find_broker`` gives (the push consumer's: the master, else a slave while it is down)."""

    def __init__(
        self,
        api: BrokerApi,
        group: str,
        find_broker: BrokerFinder,
        timeout_s: float = 3.0,
        repeat_log: RepeatLog | None = None,
    ) -> None:
        super().__init__()
        self._repeat_log = repeat_log or RepeatLog()
        self._api = api
        self.group = group
        self._find_broker = find_broker
        self._timeout_s = timeout_s

    async def load(self) -> None:
        """Nothing to load: offsets are read from the broker queue by queue."""

    async def _addr(self, mq: MessageQueue) -> str:
        addr = await self._find_broker(mq.broker_name)
        if addr is None:
            raise ClientError(f"broker {mq.broker_name} is not in the routes")
        return addr

    async def read(self, mq: MessageQueue, read_type: ReadType) -> int | None:
        if read_type is not ReadType.STORE:
            offset = self._table.get(mq)
            if offset is not None or read_type is ReadType.MEMORY:
                return offset
        offset = await self._api.query_consumer_offset(await self._addr(mq), self.group, mq, self._timeout_s)
        if offset is not None:
            self.update(mq, offset, increase_only=False)
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        await self._commit(mq, oneway=True)  # updateConsumeOffsetToBroker(mq, offset): isOneway=true

    async def persist_acked(self, mq: MessageQueue) -> None:
        await self._commit(mq, oneway=False)

    async def _commit(self, mq: MessageQueue, *, oneway: bool) -> None:
        offset = self._table.get(mq)
        if offset is None:
            return
        await self._api.update_consumer_offset(
            await self._addr(mq), self.group, mq, offset, oneway=oneway, timeout_s=self._timeout_s
        )

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Persist the given queues' offsets, changed or not (as Java does: a broker that restarted or a
        slave promoted in its place gets them again); a broker that fails is logged, tried next time."""
        wanted = set(mqs)
        changed = [mq for mq in self._table if mq in wanted]
        results = await asyncio.gather(*(self.persist_acked(mq) for mq in changed), return_exceptions=True)
        for mq, result in zip(changed, results, strict=True):
            if isinstance(result, RocketMQError):
                # Every queue of a broker that is down fails every 5 s: one line per broker and window.
                self._repeat_log.warning(
                    log,
                    ("persist", self.group, mq.broker_name),
                    "group %s: persisting the offset of %s failed: %s",
                    self.group,
                    mq,
                    result,
                )
            elif isinstance(result, BaseException):
                raise result


def default_offsets_path(client_id: str, group: str, base: Path | None = None) -> Path:
    """Where Java's LocalFileOffsetStore keeps them: ~/.rocketmq_offsets/<clientId>/<group>/offsets.json."""
    return (base or Path.home() / ".rocketmq_offsets") / client_id / group / "offsets.json"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` so that a crash at any point leaves the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss
    finally:
        os.close(dir_fd)


def _queue_key(mq: MessageQueue) -> str:
    # Java's OffsetSerializeWrapper keys: a MessageQueue as a JSON object with sorted fields.
    return orjson.dumps({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}).decode()


class LocalFileOffsetStore(_MemoryOffsets):
    """LocalFileOffsetStore, for broadcasting: every client keeps its own progress in a file.

    A damaged file (bit rot, a hand edit: the writes themselves are atomic) is refused (ClientError): read
    as empty, every queue would start from ``consume_from``, which skips messages when that is the last
    offset. ``set_aside_damaged``: for an owner whose start from consume_from skips nothing (the first
    offset, its messages idempotent), a damaged file is renamed ``<name>.damaged`` (kept for a look),
    logged, and read as empty instead."""

    def __init__(self, path: Path, *, set_aside_damaged: bool = False) -> None:
        super().__init__()
        self.path = path
        self.set_aside_damaged = set_aside_damaged
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        self._table.update(await self._read_file())

    async def _read_file(self) -> dict[MessageQueue, int]:
        try:
            data = await asyncio.to_thread(self.path.read_bytes)
        except FileNotFoundError:
            return {}
        table: dict[MessageQueue, int] = {}
        try:
            for key, offset in (orjson.loads(data).get("offsetTable") or {}).items():
                q = orjson.loads(key)
                table[MessageQueue(q["topic"], q["brokerName"], int(q["queueId"]))] = int(offset)
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
            if not self.set_aside_damaged:
                raise ClientError(f"the offsets file {self.path} is damaged: {exc}") from exc
            aside = self.path.with_name(self.path.name + ".damaged")
            try:
                await asyncio.to_thread(os.replace, self.path, aside)
            except OSError as move:  # still there: refused again next time rather than read as empty
                raise ClientError(
                    f"the offsets file {self.path} is damaged ({exc}); not set aside: {move}"
                ) from exc
            log.error(
                "the offsets file %s is damaged (%s): set aside as %s; every queue starts from its "
                "consume_from", self.path, exc, aside.name,
            )  # fmt: skip
            return {}
        return table

    async def read(self, mq: MessageQueue, read_type: ReadType) -> int | None:
        if read_type is ReadType.STORE:
            # Only this queue's entry (Java's readOffset): the others' progress in memory is newer
            # than the file's, which is up to a persist interval old.
            stored = (await self._read_file()).get(mq)
            if stored is not None:
                self._table[mq] = stored
            return stored
        return self._table.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        """Kept (Java's removeOffset is empty here): the file holds every queue's progress and is
        written whole from memory, so a queue dropped and added again (an illegal offset corrected,
        a route change) must stay in it. Forgotten, the next write of another queue's progress took
        it out of the file and the re-added queue started from consume_from again: with every queue
        expired at once, it kept pulling from 0 and being moved (a Rock-DMQ replica on an empty
        volume read nothing for over a minute in CI)."""

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all([mq])  # a local write: done once written, either way

    persist_acked = persist

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Write every known offset (the file holds all queues, not only the given ones). A failed write
        (a full or read-only volume) raises ClientError, as a broker that fails does: close() and a
        queue's removal log it and go on (Java's persistAll logs the IOException), the commit window
        tries again. An OSError escaping stopped close() half-way (never unregistered, nothing stopped)
        and left a removed queue in ``queues`` for good (never consumed again)."""
        doc = {"offsetTable": {_queue_key(mq): off for mq, off in self._table.items()}}
        data = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        async with self._lock:  # two writers would race on the temp file
            write = asyncio.get_running_loop().run_in_executor(None, write_atomically, self.path, data)
            try:
                await asyncio.shield(write)
            except OSError as exc:
                raise ClientError(f"writing the offsets file {self.path} failed: {exc}") from exc
            except asyncio.CancelledError:
                # Cancelling does not stop the thread: keep the lock until its write is over, or the
                # next writer (close()'s persist after cancelling the timer) truncates the temp file
                # under it.
                while not write.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait([write])
                raise
