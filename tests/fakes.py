"""Test doubles shared by the suites: manual clocks, a scripted remoting invoker, a failing KV, and a
message with properties of a chosen size."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.kv import KV, Op


class FakeClock:
    """A clock that only moves when told to; call it like time.monotonic."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


Handler = Callable[[str, RemotingCommand], Awaitable[RemotingCommand]]


@dataclass
class ScriptedInvoker:
    """Answers requests with ``handler(addr, cmd)``; records every call."""

    handler: Handler
    calls: list[tuple[str, RemotingCommand, float]] = field(default_factory=list)

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.calls.append((addr, cmd, timeout_s))
        return await self.handler(addr, cmd)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self.calls.append((addr, cmd, 0.0))

    def sends(self) -> list[tuple[str, RemotingCommand, float]]:
        codes = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
        return [c for c in self.calls if c[1].code in codes]


def route(brokers: dict[str, int], perm: int = 6) -> TopicRouteData:
    """A route with the given brokers (name -> queue count); broker X listens at X:10911."""
    return TopicRouteData(
        tuple(QueueData(name, n, n, perm) for name, n in brokers.items()),
        tuple(BrokerData("c", name, {0: f"{name}:10911"}) for name in brokers),
    )


def send_ok(cmd: RemotingCommand, queue_offset: int = 0, msg_id: str = "OFFSETID") -> RemotingCommand:
    queue_id = cmd.ext_fields.get("e", "0")
    return cmd.response(
        ResponseCode.SUCCESS,
        ext_fields={
            "msgId": msg_id,
            "queueId": queue_id,
            "queueOffset": str(queue_offset),
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        },
    )


class FakeWallClock:
    """Wall milliseconds, a monotonic clock and a sleep that only return when the test advances time.

    ``now_ms`` can be stepped on its own (a wall-clock jump); ``advance`` moves both clocks and wakes
    the sleepers whose deadline passed.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.wall_ms = start_ms
        self.mono_s = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.wall_ms

    def monotonic(self) -> float:
        return self.mono_s

    def sleep(self, seconds: float) -> asyncio.Future[None]:
        """Registers the deadline when called (not when first awaited), as a timer would."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if seconds <= 0:
            future.set_result(None)
        else:
            heapq.heappush(self._sleepers, (self.mono_s + seconds, next(self._seq), future))
        return future

    def advance(self, seconds: float) -> None:
        self.mono_s += seconds
        self.wall_ms += round(seconds * 1000)
        while self._sleepers and self._sleepers[0][0] <= self.mono_s:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    def step_wall(self, ms: int) -> None:
        """An NTP step or an operator's ``date -s``: the wall clock jumps, monotonic time does not."""
        self.wall_ms += ms


class FaultyKV:
    """Wraps a KV; writes or WAL syncs fail with an injected StorageError while a fault is set."""

    def __init__(self, inner: KV) -> None:
        self.inner = inner
        self.column_families = inner.column_families
        self.write_fault: str | None = None
        self.sync_fault: str | None = None
        self.writes = 0
        self.syncs = 0

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        if self.write_fault is not None:
            raise StorageError(self.write_fault)
        self.inner.write(ops, sync=sync, no_slowdown=no_slowdown)
        self.writes += 1
        if sync:
            self.sync_wal()

    def sync_wal(self) -> None:
        if self.sync_fault is not None:
            raise StorageError(self.sync_fault)
        self.inner.sync_wal()
        self.syncs += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def fullest_message(topic: str, room: int) -> Message:
    """A message whose wire properties (a property ``p`` and its own 32-character id) are as long as
    ``room`` bytes allow: at Message.validate's limit, or past it up to the broker's bound."""
    for n in range(room, 0, -1):
        msg = Message(topic, b"full", properties={"p": "v" * n}, id=new_uniq_id())
        if len(msg.wire_properties(msg.id or "").encode()) <= room:
            return msg
    raise AssertionError("no room at all")
