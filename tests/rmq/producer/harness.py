"""A producer wired to a scripted name server and brokers, with injected clocks."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import ConnectError
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import TopicRouteData
from tests.fakes import FakeClock, ScriptedInvoker, route, send_ok

Behaviour = Callable[[RemotingCommand], RemotingCommand]


@dataclass
class Harness:
    routes: dict[str, TopicRouteData] = field(
        default_factory=lambda: {"T": route({"broker-a": 4, "broker-b": 4})}
    )
    behaviour: dict[str, Behaviour] = field(default_factory=dict)  # broker name -> reply (may advance timer)
    down: set[str] = field(default_factory=set)  # brokers refusing connections
    clock: FakeClock = field(default_factory=FakeClock)  # back-off windows
    timer: FakeClock = field(default_factory=FakeClock)  # latencies and the send budget
    route_requests: list[str] = field(default_factory=list)
    offsets: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.invoker = ScriptedInvoker(self._handle)

    async def _handle(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = cmd.ext_fields["topic"]
            self.route_requests.append(topic)
            if topic not in self.routes:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info for {topic}")
            return cmd.response(ResponseCode.SUCCESS, body=self.routes[topic].to_json())
        broker = addr.split(":", maxsplit=1)[0]
        if broker in self.down:
            raise ConnectError(f"cannot connect to {addr}", addr=addr)
        if cmd.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return cmd.response(ResponseCode.SUCCESS)
        if broker in self.behaviour:
            return self.behaviour[broker](cmd)
        key = (broker, cmd.ext_fields["e"])
        offset = self.offsets.get(key, 0)
        self.offsets[key] = offset + 1
        return send_ok(cmd, offset)

    def producer(self, sleep: Callable[[float], Awaitable[None]] | None = None, **config: object) -> Producer:
        ns = NameServerClient(self.invoker, "ns:9876")
        api = BrokerApi(self.invoker, producer_group="pg")
        cfg = ProducerConfig(**config)  # type: ignore[arg-type]
        return Producer(
            ns,
            api,
            cfg,
            clock=self.clock,
            timer=self.timer,
            sleep=sleep or self.clock.sleep,
            rng=random.Random(7),
            client_id="127.0.0.1@test",
        )

    def sent_to(self) -> list[tuple[str, int]]:
        return [(addr.split(":")[0], int(cmd.ext_fields["e"])) for addr, cmd, _ in self.invoker.sends()]

    def fail(self, broker: str, code: int = ResponseCode.SYSTEM_ERROR, slow_s: float = 0.0) -> None:
        def reply(cmd: RemotingCommand) -> RemotingCommand:
            self.timer.advance(slow_s)
            return cmd.response(code, "injected")

        self.behaviour[broker] = reply

    def slow(self, broker: str, seconds: float) -> None:
        def reply(cmd: RemotingCommand) -> RemotingCommand:
            self.timer.advance(seconds)
            return send_ok(cmd)

        self.behaviour[broker] = reply
