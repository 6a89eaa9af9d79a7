"""Listeners: uvicorn for the HTTP app and grpc.aio for the gRPC servicer, each bound before start()
returns and stopped gracefully (in-flight requests finish) by stop()."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable, Generator, Sequence
from typing import Any

import grpc
import uvicorn
from grpc_health.v1 import health

from . import uvicorn_internals
from .grpc import SidecarServicer, add_health_and_reflection
from .grpc_intercept import MethodWrapper, WrappingServer
from .grpc_publish import PublishStreams
from .hot_http import HotHttp
from .http_protocol import DEFAULT_MAX_CONNECTIONS, ConnectionLimit, GuardedHttpTools
from .middleware import EdgeMiddleware
from .proto import rocksidecar_pb2_grpc as pb_grpc

# Concurrent calls on one gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; grpc core's default is
# unbounded): a client's calls past it wait for a stream, as HTTP/2 clients do. Go's gRPC servers and
# nginx advertise 100 to 250; Publish and Subscribe hold one stream each.
MAX_STREAMS_PER_CONNECTION = 100


class ListenError(OSError):
    """An API cannot listen on its address (in use by another process, not an address of this host);
    the message names the API and the address."""


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the service owns SIGTERM and SIGINT and stops the listeners in order


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; [::] takes IPv4 too, whatever net.ipv6.bindv6only says."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    def __init__(
        self,
        app: Any,
        addr: str,
        *,
        grace_s: float,
        read_timeout_s: float = 30.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        refused: Callable[[], None] = lambda: None,
    ) -> None:
        """``refused`` counts a connection refused past ``max_connections``."""
        self._app = app
        self._read_timeout_s = read_timeout_s
        self._limit = ConnectionLimit(max_connections, refused)
        self.host, self.port = split_addr(addr)
        self._grace_s = grace_s
        self._server: _Uvicorn | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        stale = uvicorn_internals.problem()
        if stale is not None:  # refused here, in one line, rather than on some later request
            raise ListenError(stale)
        host = self.host
        try:
            try:
                sock = _listen(host, self.port)
            except OSError as exc:
                if host != "::" or exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                    raise
                # A kernel without IPv6 (ipv6.disable=1): the wildcard still means every address it has
                # (the chart's [::] must not stop a replica where 0.0.0.0 worked).
                host = "0.0.0.0"
                sock = _listen(host, self.port)
        except OSError as exc:
            raise ListenError(
                f"the HTTP API cannot listen on {host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            ws="none",
            proxy_headers=False,  # applied behind the edge, on the routes that are not hot (app.api.http)
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=max(int(self._grace_s), 1),
            backlog=1024,
            http=_protocol(self._app, self._read_timeout_s, self._limit),
        )
        self._server = _Uvicorn(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))

    async def requests_done(self) -> None:
        """Wait until the requests in flight now have been answered (or abandoned)."""
        if self._server is not None:
            await asyncio.gather(*self._server.server_state.tasks, return_exceptions=True)

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (up to the grace period)."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            server.should_exit = True
            await task


def _protocol(app: Any, read_timeout_s: float, limit: ConnectionLimit | None = None) -> type[Any]:
    """The connection protocol: ours for the hot routes (app.api.hot_http), handing everything else to
    uvicorn's, unless something wraps the edge (the access log must see every request). Both count their
    connections against ``limit`` in one set (uvicorn's server state's)."""
    edge = getattr(app, "edge", None)
    counting = edge if isinstance(edge, EdgeMiddleware) else getattr(edge, "app", None)  # the access log's
    common = {
        "read_timeout_s": read_timeout_s,
        "limit": limit,
        "count_refusal": staticmethod(counting.count_as) if isinstance(counting, EdgeMiddleware) else None,
    }
    guarded = type("SidecarHttp", (GuardedHttpTools,), common)
    if not isinstance(edge, EdgeMiddleware):
        return guarded
    return type("SidecarHotHttp", (HotHttp,), {**common, "hot": edge, "fallback": guarded})


def _check_free(host: str, port: int, api: str) -> None:
    """Raise ListenError when ``host:port`` cannot be bound. gRPC's own bind failure says only "Failed to
    bind" and logs to stderr from C, so its address is tried here first, with the socket options it uses."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ListenError(f"the {api} API cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


class GrpcServer:
    def __init__(
        self,
        servicer: pb_grpc.SidecarServicer,
        addr: str,
        *,
        grace_s: float,
        max_receive_bytes: int = 4 * 1024 * 1024,
        wrappers: Sequence[MethodWrapper] = (),
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        host, port = split_addr(addr)
        _check_free(host, port, "gRPC")
        self._server: grpc.aio.Server | None = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", max_receive_bytes),
                # grpc core's connection quota: a connection past it is closed at accept, unanswered (the
                # client sees UNAVAILABLE); HTTP/2 has no place for a 503 before its preface.
                ("grpc.max_allowed_incoming_connections", max_connections),
                ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
            ],
        )
        # Every service adds itself through this, its handlers wrapped once (not interceptors: per call).
        self._services: WrappingServer | None = WrappingServer(self._server, wrappers)
        pb_grpc.add_SidecarServicer_to_server(servicer, self._services)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        self.host = host
        self._grace_s = grace_s
        self._health: health.aio.HealthServicer | None = None
        self._streams: PublishStreams | None = (
            servicer.publish_streams if isinstance(servicer, SidecarServicer) else None
        )

    async def start(self) -> None:
        if self._server is None or self._services is None:
            raise RuntimeError("the gRPC server was stopped; build a new one")
        self._health = await add_health_and_reflection(self._services)
        await self._server.start()

    async def stop(self) -> None:
        # Let go of the server here, on the loop: one that lives on to the interpreter's exit (it was
        # bound but never started, say, when the HTTP port was taken) fails noisily there.
        if self._health is not None:
            # Health checks answer NOT_SERVING from here on; their Watch streams end (app.api.grpc_health).
            await self._health.enter_graceful_shutdown()
        if self._streams is not None:
            # Stop accepting on the streams too: an open Publish stream (a client's is long-lived) is read
            # no more, its messages read so far are answered, and it ends, rather than taking and storing
            # messages until the grace runs out and being cancelled then.
            self._streams.stop()
        server, self._server = self._server, None
        self._services = None  # it holds the server too
        if server is not None:
            await server.stop(self._grace_s)
