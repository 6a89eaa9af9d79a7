"""The HTTP connection protocol of our own, on httptools, that answers the two hot routes (issues 18, 26).

``POST /v1/messages`` and ``/v1/messages:batch`` requests that the edge admits (every guard passed, a
Content-Length within its limit, HTTP/1.1, no ``Expect``) are read here and answered by the same route
function the edge would call, with the bytes uvicorn would write: its default headers (date, server),
the route's headers, and ``connection: close`` when the client asked for it. Per request this costs a
parser, a dict of headers and one task: no ASGI scope, cycle or messages, no timer armed and cancelled.

Everything else is left to uvicorn: at the first request of a connection that is not an admitted hot
one (another route, a refusal, a chunked body, a parse error, an upgrade, HTTP/1.0, no Host or several,
an absolute-form target), the connection is
handed over whole to uvicorn's protocol (``fallback``), fed the bytes from that request's first byte on,
and stays there. The handover uses only what any protocol class given to ``uvicorn.Config(http=...)``
gets: its constructor's arguments and the server state's connection and task sets.

Connection limits, as on uvicorn's side (app.api.http_protocol): a read deadline from the connection (or
the first byte of a request) to the end of its body, the keep-alive time between requests, both on one
lazily re-armed timer; a close while a body is arriving lingers (half-close, read and drop) so the
client's kernel does not reset the connection before the client read what it was sent. The connection
limit (``limit``) counts this protocol's connections and uvicorn's in one set (the server state's); a
head over MAX_HEAD bytes or with over MAX_HEADER_FIELDS fields is handed over, and uvicorn's side
answers it 431.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Protocol

import httptools

from .http_protocol import (
    LINGER_S,
    MAX_HEAD,
    MAX_HEADER_FIELDS,
    PROBLEM_JSON_BYTES,
    STATUS_LINE,
    ConnectionLimit,
    LazyDeadline,
    default_head,
)
from .middleware import CLIENT_CLOSED, INTERNAL_ERROR, FastRoute, problem_body

_HEAD_END = b"\r\n\r\n"
log = logging.getLogger("uvicorn.error")  # where uvicorn logs an application's exception


class HotRoutes(Protocol):
    def admit(self, method: str, path: str, headers: dict[bytes, bytes]) -> tuple[FastRoute, int] | None: ...

    def count_as(self, template: str, status: int) -> None: ...


class _Hot:
    """An admitted hot request: its route, where its body lies in the connection's buffer, its answer's
    connection header."""

    __slots__ = ("body", "body_at", "end", "headers", "keep_alive", "path", "query", "route")

    def __init__(self, route: FastRoute, path: str, query: bytes, headers: dict[bytes, bytes]) -> None:
        self.route, self.path, self.query, self.headers = route, path, query, headers
        self.keep_alive = True
        self.body_at = self.end = 0
        self.body = b""


class HotHttp(asyncio.Protocol):
    """One HTTP/1.1 connection. Subclassed per server with ``hot`` (the edge), ``fallback`` (uvicorn's
    protocol class for the rest) and ``read_timeout_s``."""

    hot: HotRoutes
    fallback: Any
    read_timeout_s = 30.0
    limit: ConnectionLimit | None = None

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._handover_args = (config, server_state, app_state, _loop)
        self.loop = _loop or asyncio.get_event_loop()
        self.keep_alive_s = float(config.timeout_keep_alive)
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.server_state = server_state
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn sets it
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()  # bytes from the current message's first byte on
        self._start = 0  # where the message being parsed begins in _buf
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._fields = 0  # header fields of the head being parsed
        self._reading: _Hot | None = None  # admitted, its body arriving
        self._queue: collections.deque[_Hot] = collections.deque()  # read, waiting for their answer
        self._answering = False
        self._handover_at: int | None = None  # set: the rest of the connection is uvicorn's
        self._last: tuple[tuple[bytes | None, ...], FastRoute, str, bytes, int] | None = None
        self._closing = False  # shutdown asked: answer what was read, then close
        self._open = False  # a message has begun and is not complete (its head or its body arriving)
        self._ending = False  # nothing more is read: close once the answers owed are out
        self._eof = False  # the client half-closed: it sends nothing more
        self._lingering = False
        self._paused = False
        self._writes_paused = False
        self._held: list[bytes] | None = None
        self._deadline = LazyDeadline(self.loop, self._close)  # the read deadline, or keep-alive's

    # --- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        limit = self.limit
        if limit is not None and not limit.admits(self.connections, transport, self.server_state):  # type: ignore[arg-type]
            return
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        self._deadline.set(self.read_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the answer is out, nothing more is read
        self._buf += data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # An upgrade is never admitted: its head already chose the handover, which feeds uvicorn's side
            # the bytes from that head on (the parser's own stop at the head does not cut them), and that
            # side reads nothing after the head (app.api.http_protocol: a body is never a request).
            pass
        except httptools.HttpParserError:
            if self._handover_at is None:  # uvicorn answers it, as it answered it before
                self._handover_at = self._start
        if self._handover_at is None and self._reading is None:
            if self._start:
                del self._buf[: self._start]  # what completed messages took
                self._start = 0
            if len(self._buf) > MAX_HEAD:  # an open head over MAX_HEAD: uvicorn's side answers it 431
                self._handover_at = 0
        if self._handover_at is not None:
            self._hand_over()

    def eof_received(self) -> bool:
        """The client half-closed (``shutdown(SHUT_WR)``, ``nc -N``, some proxies): it sends nothing more
        but reads on. asyncio's default closed the transport here, and an answer owed (its send going on,
        counted 200) was never written: the client, unanswered, sends again. What it sent whole is
        answered, then the connection closes (_answered); a request it left unfinished never will be,
        so with nothing owed before it (or nothing at all) the connection closes now."""
        self._eof = True
        if self._answering or self._queue:
            self._ending = True
            self._deadline.clear()  # nothing more arrives to be timed; the answers owed bound themselves
            return True
        self._flush()  # an answer held for the loop's turn goes out before the close
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self._deadline.stop()
        if self._reading is not None:
            self.hot.count_as(self._reading.path, CLIENT_CLOSED)  # gone mid-body, as the edge counts it
            self._reading = None
        self._queue.clear()

    def pause_writing(self) -> None:
        self._writes_paused = True
        self._flow()

    def resume_writing(self) -> None:
        self._writes_paused = False
        self._flow()

    def shutdown(self) -> None:
        """uvicorn's graceful stop: what is being read is read and answered with ``connection: close``;
        an idle connection closes now."""
        self._closing = True
        if self._reading is None and not self._answering and not self._queue and self.transport:
            self._flush()
            self.transport.close()

    # --- httptools callbacks --------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._open = True
        self._url = b""
        self._headers = {}
        self._fields = 0
        if self._handover_at is None:
            self._deadline.set(self.read_timeout_s)

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > MAX_HEADER_FIELDS:  # uvicorn's side answers it 431
            if self._handover_at is None:
                self._handover_at = self._start
            return
        name = name.lower()
        if name not in self._headers:  # of repeated ones, the first (as the edge reads them)
            self._headers[name] = value
        elif name == b"host" and self._handover_at is None:  # the edge answers it 400 (RFC 9112 3.2)
            self._handover_at = self._start

    def on_headers_complete(self) -> None:
        if self._handover_at is not None:
            return
        start = self._start
        head_end = self._buf.find(_HEAD_END, start, start + MAX_HEAD)  # not found: a head over MAX_HEAD
        hot = None if head_end < 0 else self._admit()
        if hot is None:  # a head over MAX_HEAD included: uvicorn's side answers it 431
            self._handover_at = start
            return
        head_end += len(_HEAD_END)
        hot.body_at = head_end
        hot.end = head_end + int(self._headers[b"content-length"])
        hot.keep_alive = self.parser.should_keep_alive()
        self._reading = hot

    def on_message_complete(self) -> None:
        self._open = False
        hot = self._reading
        if hot is None or self._handover_at is not None:
            return
        self._reading = None
        hot.body = bytes(self._buf[hot.body_at : hot.end])
        self._start = hot.end
        self._deadline.clear()  # nothing to time while it is answered
        self._queue.append(hot)
        if not self._answering:
            self._next()
        else:
            self._flow()

    # --- the hot way ---------------------------------------------------------------------------
    def _admit(self) -> _Hot | None:
        """The hot request whose head was just parsed, or None for uvicorn's way."""
        if (
            self._closing
            or self._buf[self._start : self._start + 5] != b"POST "  # the head's bytes are where we count
            or self.parser.get_http_version() != "1.1"
            or self.parser.should_upgrade()
            or b"expect" in self._headers
        ):
            return None
        headers = self._headers
        # The edge's verdict depends on the URL, these headers and the body's length against the route's
        # limit; a connection sends the same ones request after request, so the last verdict is kept
        # (about a fifth of the protocol's CPU per request). Only with a Content-Type and no
        # Transfer-Encoding, where the length matters to nothing but the limit.
        key = (
            self._url,
            headers.get(b"host"),
            headers.get(b"origin"),
            headers.get(b"authorization"),
            headers.get(b"content-type"),
        )
        last = self._last
        if last is not None and last[0] == key and b"transfer-encoding" not in headers:
            _, route, path, query, limit = last
            length = headers.get(b"content-length")
            if length is None or int(length) > limit:
                return None
            return _Hot(route, path, query, headers)
        # Not cached, so checked once per connection's key (which holds both): without Host, the edge
        # answers it 400; an absolute-form target's host is the one its guard checks (uvicorn's side
        # gives it the target's, app.api.http_protocol).
        if key[1] is None or self._url[:1] != b"/":
            return None
        parsed = httptools.parse_url(self._url)
        if b"%" in parsed.path:
            return None  # uvicorn decodes it; the ASGI way sees the decoded path
        path = parsed.path.decode("ascii")
        admitted = self.hot.admit("POST", path, headers)
        if admitted is None:
            return None
        route, limit = admitted
        query = parsed.query or b""
        if key[4] is not None and b"transfer-encoding" not in headers:
            self._last = (key, route, path, query, limit)
        return _Hot(route, path, query, headers)

    def _next(self) -> None:
        hot = self._queue.popleft()
        self._answering = True
        task = self.loop.create_task(self._answer(hot))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, hot: _Hot) -> None:
        status = 500
        try:
            scope = {"type": "http", "method": "POST", "path": hot.path, "query_string": hot.query}
            status, payload, media, extra = await hot.route(scope, hot.headers, hot.body)
            self._write(hot, status, payload, media.encode("latin-1"), extra)
        except Exception as exc:
            # As uvicorn does after an application error: logged, a 500 (problem+json, as the edge answers
            # it), the connection closed.
            log.error("Exception in ASGI application\n", exc_info=exc)
            hot.keep_alive = False
            status = 500
            self._write(hot, 500, problem_body(INTERNAL_ERROR), PROBLEM_JSON_BYTES, {})
        finally:
            self.hot.count_as(hot.path, status)
            self._answered(hot)

    def _answered(self, hot: _Hot) -> None:
        self._answering = False
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not hot.keep_alive or (self._closing and not self._queue and self._reading is None):
            self._flush()
            transport.close()
        elif self._queue:
            self._next()
        elif self._handover_at is not None:
            self._hand_over()
        elif self._ending:  # the last answer owed is out (eof_received, _close)
            self._close()
        else:
            self._flow()
            if not self._open:  # idle: keep-alive's time; a head begun keeps its read deadline
                self._deadline.set(self.keep_alive_s)

    def _write(self, hot: _Hot, status: int, payload: bytes, media: bytes, extra: dict[str, str]) -> None:
        transport = self.transport
        if transport is None or self._lingering or transport.is_closing():
            return  # lingering: the FIN is out, a write would be refused
        out = [STATUS_LINE[status], default_head(self.server_state.default_headers)]
        for key, text in extra.items():
            out += [key.lower().encode("latin-1"), b": ", text.encode("latin-1"), b"\r\n"]
        out.append(b"content-length: %d\r\ncontent-type: " % len(payload))
        out += [media, b"\r\n"]
        if not hot.keep_alive or (self._closing and not self._queue):
            hot.keep_alive = False
            out.append(b"connection: close\r\n")
        out += [b"\r\n", payload]
        data = b"".join(out)
        # With other answers in flight, held to the end of the loop's turn: written at once under 32
        # connections, throughput fell 14 %. Alone (one connection), the wait for the turn's end is pure
        # latency: written at once, p99 1.9 -> 1.3 ms at one connection (issue 18).
        if len(self.tasks) > 1:
            self._hold(data)
        else:
            self._write_now(data)

    def _hold(self, data: bytes) -> None:
        if self._held is None:
            self._held = [data]
            self.loop.call_soon(self._flush)
        else:
            self._held.append(data)

    def _write_now(self, data: bytes) -> None:
        self._flush()
        if self.transport is not None:
            self.transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and self.transport is not None and not self.transport.is_closing():
            self.transport.write(held[0] if len(held) == 1 else b"".join(held))

    # --- the rest goes to uvicorn ----------------------------------------------------------------
    def _hand_over(self) -> None:
        """Give the connection to uvicorn's protocol, from the first byte of the request we did not
        admit, once the answers before it are out (answers keep their order)."""
        if self._answering or self._queue:
            # The answers owed go first; reading is paused meanwhile (_flow) and the handed-over bytes
            # are timed by uvicorn's side once it has them: the read deadline armed at their first byte
            # would close the connection under the answers owed (their apps bound them).
            self._deadline.clear()
            self._flow()
            return
        if self.transport is None or self.transport.is_closing():
            self._flow()
            return
        self._flush()
        config, server_state, app_state, loop = self._handover_args
        rest = bytes(self._buf[self._handover_at or 0 :])
        self._buf = bytearray()
        self._reading = None  # uvicorn reads it again from its first byte
        self.connections.discard(self)
        self._deadline.stop()
        inner = self.fallback(config=config, server_state=server_state, app_state=app_state, _loop=loop)
        inner.handed_over = True  # counted against the limit when it was made
        transport, self.transport = self.transport, None
        transport.set_protocol(inner)
        inner.connection_made(transport)
        if self._writes_paused:
            # The transport called pause_writing once, on this protocol: the new one, believing writes
            # flow, answered request after request into the transport's buffer for a client that reads
            # nothing. Told, it writes nothing until they drain and reads no further than one request
            # queued behind the one it answers (as when the connection was its own from the start). So
            # reading is still resumed for it: its flow resumes only the reading it paused itself, and a
            # request it still has to read (a head cut by the read) would wait for its read deadline.
            inner.pause_writing()
        if self._paused:
            transport.resume_reading()
        if rest:
            inner.data_received(rest)
        if self._closing:
            inner.shutdown()

    # --- flow and time -------------------------------------------------------------------------
    def _flow(self) -> None:
        """Read on only while nothing waits: no queued request, no handover pending, writes flowing."""
        if self.transport is None:
            return
        pause = self._writes_paused or self._ending or bool(self._queue) or self._handover_at is not None
        if pause and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        elif not pause and self._paused:
            self._paused = False
            self.transport.resume_reading()

    def _close(self) -> None:
        """Close; while a body is arriving, half-close and read and drop what still comes for LINGER_S
        (closing with the client's data unread makes the kernel reset the connection). With an answer
        owed (a pipelined request timed out while the one before it is answered), read no more and close
        once the answers owed are out (_answered): written after the FIN or the close, an answer is lost
        though its send went on, and the client, unanswered, sends again."""
        transport = self.transport
        if transport is None or self._lingering or transport.is_closing():
            return
        if self._answering or self._queue:
            self._ending = True
            self._flow()  # pauses reading
            return
        self._flush()
        if self._reading is not None and not self._eof and transport.can_write_eof():
            self._lingering = True
            transport.write_eof()
            if self._paused:
                transport.resume_reading()
            self.loop.call_later(LINGER_S, transport.close)
            return
        transport.close()
