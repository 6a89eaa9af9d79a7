"""The machine's floor for the gRPC edge (issue 32): a Sidecar service that answers at once.

The sidecar's own ``rocksidecar.v1.Sidecar`` stubs and messages, so h2load sends the very bytes it sends
to the sidecar, and the server parses them and serializes a prebuilt answer, but does nothing else: no
validation, no broker, no ids, no metrics, no interceptors. ``Send`` answers a fixed SENT response;
``Publish`` answers every streamed message with its acknowledgement as it arrives. ``bench.compare``
drives it with the same h2load command as the sidecar's gRPC paths, in the same run, and prints the
sidecar's rate against it.

Kinds of server (to choose the edge's with numbers):
- ``aio``: grpc.aio on uvloop, as the sidecar runs it;
- ``aio+edge``: the same with the sidecar's two method wrappers (app.api.grpc_intercept), to see what
  they cost per call;
- ``sync``: grpc's thread-pool server (``grpc.server`` with a ThreadPoolExecutor of ``--threads``);
- ``grpclib``: grpclib (pure-Python gRPC on h2) on uvloop. Not a dependency of the project: it is
  measured from a directory of its own on PYTHONPATH (``pip install --target DIR grpclib``);
- ``relay``: the aio floor whose ``Send`` also makes the one broker round trip a send needs (a prebuilt
  SEND_MESSAGE_V2 frame written to the broker, its answer awaited, as bench.floor does for HTTP): the
  chain's own cost per call (grpc.aio, one broker write and one read per call) without any of the
  sidecar's work. Needs ``--broker``/``--broker-name``/``--topic``; ``Publish`` stays a no-op.

    python -m bench.grpc_floor --port 18081 [--kind aio|sync]    # prints "ready", serves
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from concurrent import futures
from contextlib import AbstractContextManager
from subprocess import Popen
from typing import Any

import grpc
import uvloop

from bench.common import bench_parser, ready_module
from bench.floor import RelayBroker, connect_broker, relay_frames
from rocksidecar.app.api.grpc_edge import MalformedRequests
from rocksidecar.app.api.grpc_intercept import MethodWrapper, WrappingServer
from rocksidecar.app.api.grpc_probes import ProbeToken
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc

KINDS = ("aio", "aio+edge", "sync", "grpclib", "relay")
# What a SENT answer carries (the sizes matter, not the values).
SENT = pb.SendResponse(
    id="7F0000010000000000000000000000AB",
    status=pb.SENT,
    broker="broker-a",
    queue_id=3,
    queue_offset=41_000_000,
    msg_id="7F00000100002A9F00000000000A1B2C",
)


class AioFloor(pb_grpc.SidecarServicer):
    async def Send(self, request: pb.SendRequest, context: Any) -> pb.SendResponse:
        return SENT

    async def Publish(self, request_iterator: AsyncIterator[pb.PublishRequest], context: Any) -> Any:
        async for req in request_iterator:
            yield pb.PublishAck(sequence=req.sequence, result=SENT)


class SyncFloor(pb_grpc.SidecarServicer):
    def Send(self, request: pb.SendRequest, context: Any) -> pb.SendResponse:
        return SENT

    def Publish(self, request_iterator: Iterator[pb.PublishRequest], context: Any) -> Any:
        for req in request_iterator:
            yield pb.PublishAck(sequence=req.sequence, result=SENT)


class RelayFloor(AioFloor):
    def __init__(self, broker: RelayBroker) -> None:
        self._broker = broker

    async def Send(self, request: pb.SendRequest, context: Any) -> pb.SendResponse:
        if not await self._broker.call():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the broker refused the message")
        return SENT


async def start_relay(port: int, broker_addr: str, frames: Sequence[bytes]) -> grpc.aio.Server:
    """The relay floor serving on 127.0.0.1:``port`` with its broker connection open."""
    return await _start_aio(port, servicer=RelayFloor(await connect_broker(broker_addr, frames)))


async def _start_aio(
    port: int, wrappers: Sequence[MethodWrapper] = (), servicer: pb_grpc.SidecarServicer | None = None
) -> grpc.aio.Server:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    services = WrappingServer(server, wrappers)
    pb_grpc.add_SidecarServicer_to_server(servicer or AioFloor(), services)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


async def _serve(started: Awaitable[grpc.aio.Server]) -> None:
    server = await started
    print("ready", flush=True)
    await server.wait_for_termination()


def _serve_sync(port: int, threads: int) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads), options=[("grpc.so_reuseport", 0)])
    pb_grpc.add_SidecarServicer_to_server(SyncFloor(), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    threading.Event().wait()  # until terminated


def _grpclib_mapping() -> dict[str, Any]:
    """The two methods as grpclib handlers, on the same generated protobuf messages."""
    from grpclib.const import Cardinality, Handler

    async def send(stream: Any) -> None:
        await stream.recv_message()
        await stream.send_message(SENT)

    async def publish(stream: Any) -> None:
        async for req in stream:
            await stream.send_message(pb.PublishAck(sequence=req.sequence, result=SENT))

    base = "/rocksidecar.v1.Sidecar/"
    return {
        f"{base}Send": Handler(send, Cardinality.UNARY_UNARY, pb.SendRequest, pb.SendResponse),
        f"{base}Publish": Handler(publish, Cardinality.STREAM_STREAM, pb.PublishRequest, pb.PublishAck),
    }


async def _serve_grpclib(port: int) -> None:
    from grpclib.server import Server

    class Floor:
        def __mapping__(self) -> dict[str, Any]:
            return _grpclib_mapping()

    server = Server([Floor()])
    await server.start("127.0.0.1", port)
    print("ready", flush=True)
    await server.wait_closed()


def grpc_floor(
    port: int, kind: str = "aio", threads: int = 16, relay: Sequence[str] = ()
) -> AbstractContextManager[Popen[str]]:
    """The floor server as a subprocess of its own (as the sidecar is), serving once it printed ready.
    ``relay``: (broker address, broker name, topic) for the ``relay`` kind."""
    args = ["--port", str(port), "--kind", kind, "--threads", str(threads)]
    if relay:
        broker, name, topic = relay
        args += ["--broker", broker, "--broker-name", name, "--topic", topic]
    return ready_module("bench.grpc_floor", *args)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--port", type=int, required=True, help="the gRPC port on 127.0.0.1")
    parser.add_argument("--kind", choices=KINDS, default="aio")
    parser.add_argument("--threads", type=int, default=16, help="the sync server's thread pool")
    parser.add_argument("--broker", help="relay: the broker's address, host:port")
    parser.add_argument("--broker-name", default="broker-a", help="relay: the broker's name")
    parser.add_argument("--topic", help="relay: a topic the broker serves")
    parser.add_argument("--body-bytes", type=int, default=256, help="relay: the relayed body's size")
    args = parser.parse_args()
    if args.kind == "relay" and not (args.broker and args.topic):
        parser.error("--kind relay needs --broker and --topic")
    if args.kind == "aio":
        uvloop.run(_serve(_start_aio(args.port)))
    elif args.kind == "aio+edge":
        uvloop.run(_serve(_start_aio(args.port, [ProbeToken(""), MalformedRequests(lambda method: None)])))
    elif args.kind == "relay":
        frames = relay_frames(args.topic, args.broker_name, b"x" * args.body_bytes)
        uvloop.run(_serve(start_relay(args.port, args.broker, frames)))
    elif args.kind == "grpclib":
        uvloop.run(_serve_grpclib(args.port))
    else:
        _serve_sync(args.port, args.threads)


if __name__ == "__main__":
    main()
