"""The machine's floor for HTTP in front of a broker (issue 18's 1-connection targets, issue 32's CPU).

A relay that does nothing but the hops: for every HTTP request from the load generator it writes one
prebuilt SEND_MESSAGE_V2 frame (or, with ``--batch N``, one SEND_BATCH_MESSAGE frame of N messages) to
the broker, waits for the broker's answer and answers ``200 {}``. It parses only what it must (the end of
the headers, Content-Length, the answer's frame); no framework, no validation, no ids, no metrics. Any
number of requests may be in flight on its one broker connection, matched to their answers by opaque (a
ring of prebuilt frames, one per opaque). Driven by the same ``wrk`` commands as the sidecar's paths, it
measures what the chain itself costs on this machine: the load generator, the relay and the broker's JVM
waking one another on shared cores, and the CPU any Python process on uvloop spends to carry a message
from an HTTP connection to the broker and back. ``bench.compare`` prints the sidecar's 1-connection p50 and
p99, and its CPU per message at 32 connections and in batches, against it.

    python -m bench.floor --broker 127.0.0.1:10911 --topic T --port 18080 [--batch 100]  # prints "ready"
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractContextManager
from subprocess import Popen

import uvloop

from bench.common import bench_parser, ready_module
from rocksidecar.rmq import Message, NameServerClient, RemotingClient
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.message_codec import encode_batch
from rocksidecar.rmq.protocol.frame import RemotingCommand, decode, encode

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
REFUSED = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n"  # wrk counts it as non-2xx
_UNIQ = "0A0A0A0A000000000000000000000001"
RELAY_FRAMES = 4096  # prebuilt frames, one per opaque in a ring (far more than the requests in flight)


def relay_frames(topic: str, broker_name: str, body: bytes, batch: int = 0) -> list[bytes]:
    """The relay's frames to queue 0 of ``topic`` on ``broker_name``, one per opaque of the ring, as the
    sidecar would send them (the same header fields and properties; one fixed id, which the broker does
    not check): SEND_MESSAGE_V2, or with ``batch`` > 0 SEND_BATCH_MESSAGE of that many messages."""
    api = BrokerApi(invoker=None)  # type: ignore[arg-type]  # only its header builder is used
    props = Message(topic, body).wire_properties(_UNIQ)
    queue = MessageQueue(topic, broker_name, 0)
    if batch > 0:
        code, payload = RequestCode.SEND_BATCH_MESSAGE, encode_batch([(body, 0, props)] * batch)
        header = api._send_header(queue, 0, 0, "WAIT\x01true", batch=True, default_topic="TBW102")
    else:
        code, payload = RequestCode.SEND_MESSAGE_V2, body
        header = api._send_header(queue, 0, 0, props, batch=False, default_topic="TBW102")
    return [encode(RemotingCommand(code, header, payload, opaque=i)) for i in range(RELAY_FRAMES)]


async def master_of(namesrv: str, topic: str) -> tuple[str, str]:
    """(address, name) of the first broker serving ``topic``, as the name server routes it."""
    remoting = RemotingClient()
    try:
        route = await NameServerClient(remoting, namesrv).get_route(topic)
    finally:
        await remoting.close()
    for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
        if broker.master_addr:
            return broker.master_addr, broker.broker_name
    raise RuntimeError(f"no master broker serves {topic}")


class Buffered(asyncio.Protocol):
    """A connection that gathers what arrives in ``buf``; ``received`` takes whole messages off it."""

    buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.received()

    def received(self) -> None:
        raise NotImplementedError


class BrokerAnswers(Buffered):
    """A broker connection: each whole answer frame is decoded and handed to ``answered`` (the HTTP and
    the gRPC floor's relays both read their broker this way)."""

    def received(self) -> None:
        while len(self.buf) >= 4:
            size = 4 + int.from_bytes(self.buf[:4], "big")
            if len(self.buf) < size:
                return
            frame, self.buf = self.buf[4:size], self.buf[size:]
            self.answered(decode(frame))

    def answered(self, answer: RemotingCommand) -> None:
        raise NotImplementedError


class RelayBroker(BrokerAnswers):
    """One broker connection with many requests in flight, each frame of the ring carrying its own opaque
    and matched to its answer by it (the HTTP and the gRPC floor's relays share it)."""

    def __init__(self, frames: Sequence[bytes]) -> None:
        self.frames, self._next = frames, 0
        self.waiting: dict[int, asyncio.Future[bool]] = {}

    def answered(self, answer: RemotingCommand) -> None:
        fut = self.waiting.pop(answer.opaque, None)
        if fut is not None and not fut.done():
            fut.set_result(answer.code == ResponseCode.SUCCESS)

    async def call(self) -> bool:
        """Whether the broker stored the next frame's message(s)."""
        opaque = self._next = (self._next + 1) % len(self.frames)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting[opaque] = fut
        self.transport.write(self.frames[opaque])
        return await fut


async def connect_broker(broker_addr: str, frames: Sequence[bytes]) -> RelayBroker:
    host, broker_port = broker_addr.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    _, broker = await loop.create_connection(lambda: RelayBroker(frames), host, int(broker_port))
    return broker


class _Http(Buffered):
    def __init__(self, broker: RelayBroker) -> None:
        self.broker = broker

    def received(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower()
        at = head.find(b"content-length:")
        length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length :]  # wrk sends one request at a time on a connection
        asyncio.get_running_loop().create_task(self._answer())

    async def _answer(self) -> None:
        stored = await self.broker.call()
        if not self.transport.is_closing():  # wrk closes its connections when its time is up
            self.transport.write(ANSWER if stored else REFUSED)


async def start(broker_addr: str, frames: Sequence[bytes], port: int = 0) -> asyncio.Server:
    """The relay listening on 127.0.0.1:``port`` (0: any free port) with its broker connection open."""
    broker = await connect_broker(broker_addr, frames)
    return await asyncio.get_running_loop().create_server(lambda: _Http(broker), "127.0.0.1", port)


async def serve(broker_addr: str, frames: Sequence[bytes], port: int) -> None:
    server = await start(broker_addr, frames, port)
    print("ready", flush=True)
    await server.serve_forever()


def floor_relay(
    broker_addr: str, broker_name: str, topic: str, port: int, batch: int = 0
) -> AbstractContextManager[Popen[str]]:
    """The relay as a subprocess of its own (as the sidecar is), serving once it printed ready."""
    args = ["--broker", broker_addr, "--broker-name", broker_name, "--topic", topic, "--port", str(port)]
    return ready_module("bench.floor", *args, "--batch", str(batch))


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--broker", required=True, help="the broker's address, host:port")
    parser.add_argument("--broker-name", default="broker-a")
    parser.add_argument("--topic", required=True, help="a topic the broker serves")
    parser.add_argument("--port", type=int, required=True, help="the HTTP port on 127.0.0.1")
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--batch", type=int, default=0, help="messages per frame (0: SEND_MESSAGE_V2)")
    args = parser.parse_args()
    frames = relay_frames(args.topic, args.broker_name, b"x" * args.body_bytes, args.batch)
    uvloop.run(serve(args.broker, frames, args.port))


if __name__ == "__main__":
    main()
