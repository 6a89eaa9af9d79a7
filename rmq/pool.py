"""RemotingClient: one connection per address, opened on demand and replaced after a loss.

It is the ``Invoker`` the name server client, broker API and producer depend on; tests substitute a
scripted invoker with the same two methods.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Protocol

from .acl import Credentials, sign
from .connection import Connection, RequestHandler, connect
from .errors import ClientError, ConnectError
from .protocol.frame import RemotingCommand
from .singleflight import SingleFlight

DEFAULT_CONNECT_TIMEOUT_S = 3.0


class Invoker(Protocol):
    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand: ...

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None: ...


class RemotingClient:
    def __init__(
        self,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        credentials: Credentials | None = None,
        on_request: RequestHandler | None = None,
        tls: ssl.SSLContext | Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        """``tls``: every connection over TLS with this context (rmq.tls.client_context), or with the one
        this callable gives for each new connection (rmq.tls.ReloadingContext)."""
        self._connect_timeout_s = connect_timeout_s
        self._credentials = credentials
        self._on_request = on_request
        self._tls = tls
        self._conns: dict[str, Connection] = {}
        self._connecting = SingleFlight[str, Connection]()  # one connect per address, however many wait
        self._closed = False

    async def connection(self, addr: str, timeout_s: float | None = None) -> Connection:
        """The open connection to ``addr``, connecting first if there is none; ``timeout_s`` bounds
        this caller's wait only. ConnectError when it cannot be had in time, ClientError once closed."""
        conn = self._conns.get(addr)
        if conn is not None and not conn.is_closed:
            return conn
        if self._closed:
            raise ClientError("the remoting client is closed")
        try:
            # One connect per address, shared by every caller, with the client's own connect timeout
            # (Java's connectTimeoutMillis): were it the first caller's budget, a caller with 0.1 s left
            # would fail the connect of every caller waiting with it. Each caller waits its own budget.
            async with asyncio.timeout(timeout_s):
                return await self._connecting.run(addr, lambda: self._connect(addr))
        except TimeoutError:  # this caller's budget, spent: what a connect timing out raises
            raise ConnectError(f"cannot connect to {addr}: timed out", addr=addr) from None
        except asyncio.CancelledError:
            # close() cancels the shared connect; a caller nobody cancelled gets the closed client's
            # RocketMQError (as a request on an open connection gets ConnectionClosed), so that its
            # handling (spool for retry, fail over, answer 5xx) runs instead of a cancelled task.
            task = asyncio.current_task()
            if self._closed and task is not None and task.cancelling() == 0:
                raise ClientError("the remoting client is closed") from None
            raise

    async def _connect(self, addr: str) -> Connection:
        tls = self._tls() if callable(self._tls) else self._tls
        conn = await connect(addr, self._connect_timeout_s, self._on_request, self._forget, tls)
        self._conns[addr] = conn
        return conn

    def _forget(self, conn: Connection) -> None:
        if self._conns.get(conn.addr) is conn:
            del self._conns[conn.addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        conn = self._conns.get(addr)
        if conn is None or conn.is_closed:  # connecting spends part of the timeout
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            conn = await self.connection(addr, timeout_s)
            timeout_s = max(deadline - loop.time(), 0.001)
        if self._credentials is not None:
            sign(cmd, self._credentials)
        return await conn.invoke(cmd, timeout_s)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        if self._credentials is not None:
            sign(cmd, self._credentials)
        await conn.invoke_oneway(cmd)

    def connected_addresses(self) -> list[str]:
        return [a for a, c in self._conns.items() if not c.is_closed]

    async def close(self) -> None:
        self._closed = True
        self._connecting.cancel_all()
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
