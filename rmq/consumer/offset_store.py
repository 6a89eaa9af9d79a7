"""Where a consumer group's progress lives: on the brokers (clustering) or in a local file (broadcasting).

Both keep the offsets in memory, updated as messages finish (only forward, so a late small offset from a
slow message never rolls the window back) and persisted by the consumer every 5 s and on shutdown. An
offset is "the next message to consume", as in Java; None means the group never committed one.
"""

from __future__ import annotations

import asyncio
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

log = logging.getLogger(__name__)


class ReadType(enum.Enum):
    MEMORY = "memory"
    STORE = "store"
    MEMORY_THEN_STORE = "memory-then-store"


class OffsetStore(Protocol):
    async def load(self) -> None: ...

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool) -> None: ...

    async def read(self, mq: MessageQueue, read_type: ReadType) -> int | None: ...

    async def persist(self, mq: MessageQueue) -> None: ...

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None: ...

    def remove(self, mq: MessageQueue) -> None: ...


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


BrokerFinder = Callable[[str], Awaitable[str | None]]  # broker name -> master address


class RemoteOffsetStore(_MemoryOffsets):
    """RemoteBrokerOffsetStore: QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET on the queue's master."""

    def __init__(self, api: BrokerApi, group: str, find_broker: BrokerFinder, timeout_s: float = 3.0) -> None:
        super().__init__()
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
        offset = self._table.get(mq)
        if offset is None:
            return
        await self._api.update_consumer_offset(
            await self._addr(mq), self.group, mq, offset, timeout_s=self._timeout_s
        )

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Persist the given queues' offsets, changed or not (as Java does: a broker that restarted or a
        slave promoted in its place gets them again); a broker that fails is logged, tried next time."""
        wanted = set(mqs)
        changed = [mq for mq in self._table if mq in wanted]
        results = await asyncio.gather(*(self.persist(mq) for mq in changed), return_exceptions=True)
        for mq, result in zip(changed, results, strict=True):
            if isinstance(result, RocketMQError):
                log.warning("group %s: persisting the offset of %s failed: %s", self.group, mq, result)
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
    """LocalFileOffsetStore, for broadcasting: every client keeps its own progress in a file."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        try:
            data = await asyncio.to_thread(self.path.read_bytes)
        except FileNotFoundError:
            return
        try:
            table = orjson.loads(data).get("offsetTable") or {}
            for key, offset in table.items():
                q = orjson.loads(key)
                self._table[MessageQueue(q["topic"], q["brokerName"], int(q["queueId"]))] = int(offset)
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ClientError(f"the offsets file {self.path} is damaged: {exc}") from exc

    async def read(self, mq: MessageQueue, read_type: ReadType) -> int | None:
        if read_type is ReadType.STORE:
            await self.load()
        return self._table.get(mq)

    async def persist(self, mq: MessageQueue) -> None:
        await self.persist_all([mq])

    async def persist_all(self, mqs: Collection[MessageQueue]) -> None:
        """Write every known offset (the file holds all queues, not only the given ones)."""
        doc = {"offsetTable": {_queue_key(mq): off for mq, off in self._table.items()}}
        data = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
        async with self._lock:  # two writers would race on the temp file
            await asyncio.to_thread(write_atomically, self.path, data)
