"""A loopback TCP listener whose connections are the client's own Connection, server side: it can be
stopped (connections dropped, new ones refused) and started again on the same port."""

from __future__ import annotations

import asyncio
import errno
import random
import ssl
from collections.abc import Callable
from pathlib import Path

from rocksidecar.rmq.connection import Connection, RequestHandler
from rocksidecar.rmq.message_codec import pack_host

MAX_BROKERS = 26  # broker-a .. broker-z
BROKER_PORT_STEP = 10  # broker i listens on base + 10 * i, as the CLI documents

LOOPBACK = "127.0.0.1"
# Ports for a listener asked for "any port": below the kernel's ephemeral range. A port from that range,
# freed while its server is stopped, can become the source port of any outgoing connection meanwhile, and
# the restart then failed with EADDRINUSE (a flaky broker restart in the tests); the kernel never hands a
# port below the range to an outgoing connection.
OWN_PORTS_FROM = 20000
OWN_PORT_TRIES = 64
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _own_ports() -> range:
    """The ports below the ephemeral range, from OWN_PORTS_FROM (empty when the range starts lower)."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return range(OWN_PORTS_FROM, max(OWN_PORTS_FROM, low))


class ServerConnection(Connection):
    """A Connection accepted by a listener; ``addr`` and ``peer_host`` name the client's end. A test
    broker holds every pull its clients send: no limit on their requests in progress."""

    peer_running_limit = 1 << 30

    def __init__(self, on_request: RequestHandler, on_close: Callable[[Connection], None]) -> None:
        super().__init__("(accepting)", on_request, on_close)
        self.peer_host = pack_host(LOOPBACK, 0)  # packed ip + port: the born host of what it sends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.is_closed:  # dropped by a stop between its accept and now: drop the socket as well
            self.abort()
            return
        peer = transport.get_extra_info("peername")
        if peer:
            self.addr = f"{peer[0]}:{peer[1]}"
            self.peer_host = pack_host(peer[0], peer[1])


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A TLS server's context from PEM files; ``client_ca``: require a client certificate it signed.
    Raises OSError or ssl.SSLError for a file that does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class Listener:
    def __init__(
        self,
        handler: RequestHandler,
        *,
        port: int = 0,
        host: str = LOOPBACK,
        on_close: Callable[[Connection], None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._handler = handler
        self._on_close = on_close
        self._tls = tls  # TLS only, as a RocketMQ server with tls.server.mode=enforcing
        self.host = host
        self.port = port  # 0 until the first start binds an ephemeral port; then kept for restarts
        self.connections: set[ServerConnection] = set()
        self._server: asyncio.Server | None = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen (again) on the port; raises OSError when it is taken. Port 0: a free one below the
        ephemeral range (see OWN_PORTS_FROM), kept for restarts; an ephemeral one if none is free."""
        if self._server is not None:
            return
        loop = asyncio.get_running_loop()
        if self.port == 0:
            self._server = await self._bind_own(loop)
        else:
            self._server = await loop.create_server(self._accept, self.host, self.port, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _bind_own(self, loop: asyncio.AbstractEventLoop) -> asyncio.Server:
        ports = _own_ports()
        for port in random.sample(ports, min(OWN_PORT_TRIES, len(ports))):
            try:
                return await loop.create_server(self._accept, self.host, port, ssl=self._tls)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
        return await loop.create_server(self._accept, self.host, 0, ssl=self._tls)

    async def stop(self) -> None:
        """Refuse new connections and drop every open one."""
        server, self._server = self._server, None
        if server is None:
            return
        # asyncio makes an accepted socket's transport in a task of its own, and on Python 3.11 that task
        # fails once the server is closed (Server._attach asserts) and leaves the socket open, unanswered,
        # until a garbage collection: the client's requests on it time out instead of failing. So: accept
        # no more, let the tasks of sockets already accepted make their transports (they are queued before
        # this coroutine's next turn), then close the server and drop every connection.
        loop = asyncio.get_running_loop()
        for sock in server.sockets:
            loop.remove_reader(sock.fileno())
        await asyncio.sleep(0)
        server.close()
        self.drop_connections()
        await server.wait_closed()

    def drop_connections(self) -> int:
        """Abort every client connection now (as a crashed peer or a network cut would)."""
        conns = list(self.connections)
        for conn in conns:
            conn.abort()
        return len(conns)

    def _accept(self) -> ServerConnection:
        conn = ServerConnection(self._handler, self._closed)
        self.connections.add(conn)
        return conn

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self._on_close is not None:
            self._on_close(conn)
