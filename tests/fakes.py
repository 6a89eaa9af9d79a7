"""Test doubles shared by the suites: a manual clock and a scripted remoting invoker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.rocketmq.codes import RequestCode, ResponseCode
from app.rocketmq.protocol.frame import RemotingCommand
from app.rocketmq.route import BrokerData, QueueData, TopicRouteData


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
