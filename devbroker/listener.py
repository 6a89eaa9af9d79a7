"""A loopback TCP listener whose connections are the client's own Connection, server side: it can be
stopped (connections dropped, new ones refused) and started again on the same port."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rocksidecar.rmq.connection import Connection, RequestHandler
from rocksidecar.rmq.message_codec import pack_host

MAX_BROKERS = 26  # broker-a .. broker-z
BROKER_PORT_STEP = 10  # broker i listens on base + 10 * i, as the CLI documents

LOOPBACK = "127.0.0.1"


class ServerConnection(Connection):
    """A Connection accepted by a listener; ``addr`` and ``peer_host`` name the client's end. A test
    broker holds every pull its clients send: no limit on their requests in progress."""

    peer_running_limit = 1 << 30

    def __init__(self, on_request: RequestHandler, on_close: Callable[[Connection], None]) -> None:
        super().__init__("(accepting)", on_request, on_close)
        self.peer_host = pack_host(LOOPBACK, 0)  # packed ip + port: the born host of what it sends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.addr = f"{peer[0]}:{peer[1]}"
            self.peer_host = pack_host(peer[0], peer[1])


class Listener:
    def __init__(
        self,
        handler: RequestHandler,
        *,
        port: int = 0,
        host: str = LOOPBACK,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self._handler = handler
        self._on_close = on_close
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
        """Listen (again) on the port; raises OSError when it is taken."""
        if self._server is not None:
            return
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections and drop every open one."""
        server, self._server = self._server, None
        if server is None:
            return
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
