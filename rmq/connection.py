"""One remoting connection: frames out, frames in, responses matched to requests by opaque.

Requests the peer initiates (a broker's NOTIFY_CONSUMER_IDS_CHANGED, or any request when this is the
server side of devbroker) go to ``on_request``, a bounded number at once: the rest wait, a bounded number
and size of them, and past that they are refused as Java's remoting layer refuses a request its full
executor rejects (SYSTEM_BUSY; a one-way request is dropped). A broker sending a million transaction
checks costs at most that, however many it sends. When the connection drops, every waiter fails at once
with ConnectionClosed instead of waiting for its timeout.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterator
from typing import cast

from .codes import FLAG_ONEWAY, ResponseCode
from .errors import ConnectError, ConnectionClosed, FrameError, RemotingError, RequestTimeout
from .protocol.frame import FrameDecoder, RemotingCommand, encode
from .protocol.numbers import INT32_MAX
from .route import is_host_port

log = logging.getLogger(__name__)

RequestHandler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]


_BUSY_REMARK = "[OVERLOAD]system busy, start flow control for a while"  # Java's, word for word
# How long a one-way request waits for paused writes to resume: Java's endTransactionOneway's 3000 ms.
ONEWAY_TIMEOUT_S = 3.0
# Answers to the peer's requests (and SYSTEM_BUSY refusals) written while writes are paused, at most this
# many bytes until they resume; past it they are dropped: a peer that floods requests and reads none of
# the answers would grow the buffer without end (its requests time out on its side; a broker asks again).
# Only the answers count: a large answer or request of ours that paused writes says nothing of the peer.
SEND_HELD_MAX_BYTES = 4 * 1024 * 1024
# What a decoded header field holds beyond its characters (two str objects and a dict slot: about 85
# bytes a field measured, less the characters); a header has at most 256 fields.
_FIELD_OVERHEAD_BYTES = 80


def _held_bytes(cmd: RemotingCommand) -> int:
    """The memory a waiting request from the peer holds: its body and its header (up to MAX_HEADER_BYTES,
    1 MiB, a frame: uncounted, 2000 waiting requests could hold 2 GiB). The decoder keeps no frame
    length, so the header is its fields and remark, as decoded."""
    size = len(cmd.body) + len(cmd.remark or "")
    for key, value in cmd.ext_fields.items():
        size += len(key) + len(value) + _FIELD_OVERHEAD_BYTES
    return size


class Connection(asyncio.Protocol):
    # Requests from the peer: handled at once, waiting (Java's producer holds 2000 transaction checks for
    # its one check thread) and the bytes of those waiting. The server side of devbroker lifts them.
    peer_running_limit = 16
    peer_waiting_limit = 2000
    peer_waiting_bytes_limit = 64 * 1024 * 1024

    def __init__(
        self,
        addr: str,
        on_request: RequestHandler | None = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.addr = addr
        self._on_request = on_request
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        # The loop the connection lives on, kept: asyncio.get_running_loop() costs a getpid() system
        # call on Python 3.11, and a send would make three.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._decoder = FrameDecoder()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # Request numbers (opaques) are a Java int to the peer, whose decoder refuses 2**31 and with it the
        # connection: after INT32_MAX they start again at 1, as Java's AtomicInteger wraps (but staying
        # positive). A run of them is a range iterator, as quick as itertools.count; _next_run starts the
        # next run when one ends.
        self._opaques: Iterator[int] = iter(range(1, INT32_MAX + 1))
        self._opaques_end = INT32_MAX + 1  # where the current run stops
        self._closed: BaseException | None = None
        self._drain: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: collections.deque[tuple[RemotingCommand, int]] = collections.deque()  # and size
        self._waiting_bytes = 0
        self.refused_requests = 0  # requests from the peer refused (or dropped) past the limits
        self.unmatched_responses = 0  # responses to no request of ours (late, after their timeout)
        self.dropped_answers = 0  # answers to the peer dropped: it reads none (SEND_HELD_MAX_BYTES)
        self._held_answers = 0  # bytes of answers written since writes paused
        self._out: list[bytes] = []  # frames written in this loop iteration, flushed together
        self.closed_event = asyncio.Event()

    # asyncio.Protocol callbacks ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same methods.
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._decoder.feed(data)
        except FrameError as exc:
            log.warning("corrupt frame from %s: %s; closing", self.addr, exc)
            self._fail(exc)
            return
        for cmd in commands:
            if cmd.is_response:
                fut = self._pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                else:
                    self.unmatched_responses += 1
            else:
                self._dispatch(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionClosed(f"connection to {self.addr} closed", addr=self.addr))

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._held_answers = 0
        if self._drain is not None:
            if not self._drain.done():
                self._drain.set_result(None)
            self._drain = None

    # requests out -------------------------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self._closed is not None

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request and wait for its response, at most ``timeout_s`` seconds."""
        transport = self._writable()
        try:
            opaque = next(self._opaques)
        except StopIteration:  # once in 2**31 - 1 requests, or at an opaque still pending after a wrap
            opaque = self._next_run()
        cmd.opaque = opaque
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._pending[opaque] = fut
        timer = loop.call_later(timeout_s, self._expire, opaque, timeout_s)
        try:
            self._write(transport, encode(cmd))
            drain = self._drain
            if drain is not None:
                # Writes are paused (the peer reads slowly, or not at all): wait for them to resume or for
                # the answer, whichever comes first, so that the timer still ends the request. wait()
                # neither cancels the drain (shared by every writer) nor leaves a callback on it.
                await asyncio.wait((drain, fut), return_when=asyncio.FIRST_COMPLETED)
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # mark a failure seen when we left through another exception

    async def invoke_oneway(self, cmd: RemotingCommand, timeout_s: float = ONEWAY_TIMEOUT_S) -> None:
        """Send a request that gets no answer. While writes are paused it waits at most ``timeout_s`` for
        them to resume before writing, and else fails with RequestTimeout having written nothing, as
        Java's invokeOneway waits for a permit: a peer that sends transaction checks and never reads the
        answers holds neither a handler slot for long nor a growing buffer of them."""
        drain = self._drain
        if drain is not None:
            await asyncio.wait((drain,), timeout=timeout_s)  # never cancels the shared drain
            if not drain.done():
                raise RequestTimeout(
                    f"writes to {self.addr} paused for {timeout_s:.3f} s; one-way request not sent",
                    addr=self.addr,
                )
            # a connection lost meanwhile failed the drain; _writable below says so
        transport = self._writable()
        try:
            opaque = next(self._opaques)
        except StopIteration:
            opaque = self._next_run()
        cmd.opaque = opaque
        cmd.flag |= FLAG_ONEWAY
        self._write(transport, encode(cmd))

    def send(self, cmd: RemotingCommand) -> None:
        """Write a command as is (responses from the server side); dropped if the connection is gone, or
        when answers written while writes stay paused would pass SEND_HELD_MAX_BYTES (the peer reads
        none of them)."""
        transport = self._transport
        if transport is None or self._closed is not None:
            return
        frame = encode(cmd)
        if self._drain is not None:
            if self._held_answers + len(frame) > SEND_HELD_MAX_BYTES:
                self.dropped_answers += 1
                if self.dropped_answers == 1 or self.dropped_answers % 10000 == 0:
                    log.warning("%s reads none of our answers: %d dropped", self.addr, self.dropped_answers)
                return
            self._held_answers += len(frame)
        self._write(transport, frame)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail(ConnectionClosed(f"connection to {self.addr} closed locally", addr=self.addr))

    def abort(self) -> None:
        """Drop the connection without flushing (fault injection, broken peers)."""
        if self._transport is not None:
            self._transport.abort()
        self._fail(ConnectionClosed(f"connection to {self.addr} aborted", addr=self.addr))

    # internals ----------------------------------------------------------------------------------
    def _next_run(self) -> int:
        """The next opaque once a run is used up: after INT32_MAX, 1 again. One still pending from the
        round before (a held pull, a slow send) is skipped, never reused: its late answer would complete
        the new request. A run stops before the next of those, to look at it again when the count gets
        there (requests of this round are all below the count)."""
        opaque = self._opaques_end
        pending = self._pending
        while True:
            if opaque > INT32_MAX:
                opaque = 1
            if opaque not in pending:
                break
            opaque += 1
        end = min((p for p in pending if p > opaque), default=INT32_MAX + 1)
        self._opaques = iter(range(opaque + 1, end))
        self._opaques_end = end
        return opaque

    def _write(self, transport: asyncio.Transport, frame: bytes) -> None:
        # Many concurrent requests would cost one send() syscall each; gather those of one loop
        # iteration into a single write.
        if not self._out:
            (self._loop or asyncio.get_running_loop()).call_soon(self._flush, transport)
        self._out.append(frame)

    def _flush(self, transport: asyncio.Transport) -> None:
        out, self._out = self._out, []
        if self._closed is None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _writable(self) -> asyncio.Transport:
        if self._closed is not None or self._transport is None or self._transport.is_closing():
            raise ConnectionClosed(f"connection to {self.addr} is closed", addr=self.addr)
        return self._transport

    def _expire(self, opaque: int, timeout_s: float) -> None:
        fut = self._pending.pop(opaque, None)
        if fut is not None and not fut.done():
            fut.set_exception(
                RequestTimeout(f"no response from {self.addr} within {timeout_s:.3f} s", addr=self.addr)
            )

    def _fail(self, exc: BaseException) -> None:
        if self._closed is not None:
            return
        if not isinstance(exc, RemotingError):
            exc = ConnectionClosed(f"connection to {self.addr} lost: {exc}", addr=self.addr)
        self._closed = exc
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(exc)
            self._drain.exception()  # writers waiting on it see it; nobody else has to
        self._waiting.clear()
        self._waiting_bytes = 0
        for task in self._tasks:
            task.cancel()
        self.closed_event.set()
        if self._on_close is not None:
            self._on_close(self)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if self._on_request is None:
            if not cmd.is_oneway:
                self.send(
                    cmd.response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
                    )
                )
            return
        if len(self._tasks) < self.peer_running_limit:
            self._start(cmd)
            return
        size = _held_bytes(cmd)
        if (
            len(self._waiting) >= self.peer_waiting_limit
            or self._waiting_bytes + size > self.peer_waiting_bytes_limit
        ):
            self._refuse(cmd)
            return
        self._waiting.append((cmd, size))
        self._waiting_bytes += size

    def _start(self, cmd: RemotingCommand) -> None:
        task = (self._loop or asyncio.get_running_loop()).create_task(self._handle(cmd))
        self._tasks.add(task)
        task.add_done_callback(self._handled)

    def _handled(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._waiting and self._closed is None:
            cmd, size = self._waiting.popleft()
            self._waiting_bytes -= size
            self._start(cmd)

    def _refuse(self, cmd: RemotingCommand) -> None:
        self.refused_requests += 1
        if self.refused_requests == 1 or self.refused_requests % 10000 == 0:
            log.warning(
                "%s sends more requests than %d at once and %d waiting (%d refused so far; latest code %s)",
                self.addr,
                self.peer_running_limit,
                self.peer_waiting_limit,
                self.refused_requests,
                cmd.code,
            )
        if not cmd.is_oneway:
            self.send(cmd.response(ResponseCode.SYSTEM_BUSY, _BUSY_REMARK))

    async def _handle(self, cmd: RemotingCommand) -> None:
        assert self._on_request is not None
        try:
            response = await self._on_request(self, cmd)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug answers SYSTEM_ERROR, as Java's remoting layer does
            log.exception("handler for request code %s failed", cmd.code)
            response = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None and not cmd.is_oneway:
            response.opaque = cmd.opaque
            self.send(response)


async def connect(
    addr: str,
    timeout_s: float,
    on_request: RequestHandler | None = None,
    on_close: Callable[[Connection], None] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Connection:
    """Open a connection to ``host:port`` (over TLS with ``tls``, handshake included in ``timeout_s``);
    ConnectError when that fails or takes too long."""
    if not is_host_port(addr):  # a route's address is the name server's word (a port of 99999 once
        raise ConnectError(f"bad address {addr!r}", addr=addr)  # raised OverflowError out of here)
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            _, proto = await loop.create_connection(
                lambda: Connection(addr, on_request, on_close),
                host,
                int(port),
                ssl=tls,
                server_hostname=host if tls is not None else None,
            )
    except (OSError, TimeoutError) as exc:
        raise ConnectError(f"cannot connect to {addr}: {exc or 'timed out'}", addr=addr) from exc
    except ValueError as exc:  # e.g. a NUL in the host
        raise ConnectError(f"bad address {addr!r}", addr=addr) from exc
    return proto
