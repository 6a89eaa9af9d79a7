"""The machine's floor for one HTTP connection in front of a broker (issue 18's 1-connection targets).

A relay that does nothing but the hops: for every HTTP request from the load generator it writes one
prebuilt SEND_MESSAGE_V2 frame to the broker, waits for the broker's answer and answers ``200 {}``. It
parses only what it must (the end of the headers, Content-Length, the answer's length prefix); no
framework, no validation, no ids, no metrics. Driven by the same ``wrk`` command as the sidecar's
1-connection path, it measures what the chain itself costs on this machine: the load generator, the relay
and the broker's JVM waking one another on shared cores. The sidecar's p50 and p99 at one connection are
printed against it by ``bench.compare``.

    python -m bench.floor --broker 127.0.0.1:10911 --topic T --port 18080    # prints "ready", serves
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from subprocess import Popen

import uvloop

from bench.common import bench_parser, ready_module
from rocksidecar.rmq import Message, NameServerClient, RemotingClient
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.protocol.frame import RemotingCommand, decode, encode

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
REFUSED = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n"  # wrk counts it as non-2xx
_UNIQ = "0A0A0A0A000000000000000000000001"


def send_frame(topic: str, broker_name: str, body: bytes) -> bytes:
    """One SEND_MESSAGE_V2 frame to queue 0 of ``topic`` on ``broker_name``, as the sidecar would send it
    (the same header fields and properties; one fixed id, which the broker does not check)."""
    api = BrokerApi(invoker=None)  # type: ignore[arg-type]  # only its header builder is used
    msg = Message(topic, body)
    header = api._send_header(
        MessageQueue(topic, broker_name, 0),
        0,
        0,
        msg.wire_properties(_UNIQ),
        batch=False,
        default_topic="TBW102",
    )
    return encode(RemotingCommand(RequestCode.SEND_MESSAGE_V2, header, body))


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


class _Broker(BrokerAnswers):
    """The relay's one broker connection; one request in flight at a time (one HTTP connection)."""

    def __init__(self) -> None:
        self.waiting: asyncio.Future[bool] | None = None

    def answered(self, answer: RemotingCommand) -> None:
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(answer.code == ResponseCode.SUCCESS)

    async def call(self, frame: bytes) -> bool:
        """Whether the broker stored the message."""
        self.waiting = asyncio.get_running_loop().create_future()
        self.transport.write(frame)
        return await self.waiting


class _Http(Buffered):
    def __init__(self, broker: _Broker, frame: bytes) -> None:
        self.broker, self.frame = broker, frame

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
        stored = await self.broker.call(self.frame)
        if not self.transport.is_closing():  # wrk closes its connections when its time is up
            self.transport.write(ANSWER if stored else REFUSED)


async def start(broker_addr: str, frame: bytes, port: int = 0) -> asyncio.Server:
    """The relay listening on 127.0.0.1:``port`` (0: any free port) with its broker connection open."""
    loop = asyncio.get_running_loop()
    host, broker_port = broker_addr.rsplit(":", 1)
    _, broker = await loop.create_connection(_Broker, host, int(broker_port))
    return await loop.create_server(lambda: _Http(broker, frame), "127.0.0.1", port)


async def serve(broker_addr: str, frame: bytes, port: int) -> None:
    server = await start(broker_addr, frame, port)
    print("ready", flush=True)
    await server.serve_forever()


def floor_relay(
    broker_addr: str, broker_name: str, topic: str, port: int
) -> AbstractContextManager[Popen[str]]:
    """The relay as a subprocess of its own (as the sidecar is), serving once it printed ready."""
    args = ["--broker", broker_addr, "--broker-name", broker_name, "--topic", topic, "--port", str(port)]
    return ready_module("bench.floor", *args)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--broker", required=True, help="the broker's address, host:port")
    parser.add_argument("--broker-name", default="broker-a")
    parser.add_argument("--topic", required=True, help="a topic the broker serves")
    parser.add_argument("--port", type=int, required=True, help="the HTTP port on 127.0.0.1")
    parser.add_argument("--body-bytes", type=int, default=256)
    args = parser.parse_args()
    uvloop.run(
        serve(args.broker, send_frame(args.topic, args.broker_name, b"x" * args.body_bytes), args.port)
    )


if __name__ == "__main__":
    main()
