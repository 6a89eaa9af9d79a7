"""uvicorn's httptools protocol with the connection-level limits uvicorn lacks.

- A read timeout: a client gets ``read_timeout_s`` from the connection (or the first byte of its next
  request) to the end of the request body, then the connection is closed. uvicorn waits for ever for
  slow headers and slow bodies.
- A lingering close: when the connection is closed while the request body is still arriving (a 413
  answered mid-body, a timeout), it is half-closed and what the client still sends is read and dropped
  for ``LINGER_S`` before the close. Closing at once, with the client's data unread, makes the kernel
  send a reset, and the client's kernel then discards the answer before the client has read it.
- A bounded head: uvicorn's parser holds a request's URL and header fields whatever their size (300 MB of
  headers took 340 MB); past ``MAX_HEAD`` bytes the request is answered 431 and the connection closed.
- A bounded number of header fields: under MAX_HEAD, one-byte fields would be some 10 000 Python
  objects per request; past ``MAX_HEADER_FIELDS`` the request is answered 431 and the connection closed.
- A bounded number of connections (``limit``, setting max_connections, one count with app.api.hot_http's
  connections: uvicorn's server state's set): past it a new connection is answered 503 at once and closed
  (``ConnectionLimit``).
- Pipelined requests read no faster than they are answered: uvicorn resumes reading after every answer,
  even with requests still queued, so a client pipelining without end grew the queue by a read's worth
  per answer (1 GB in 6 s from one connection); reading stays paused until the queue is empty.
- Every answer problem+json: a request the parser cannot read is answered 400 problem+json (uvicorn's is
  text/plain), and these refusals (400, 431) are counted as the edge counts a request no route matched.
  Like a 431, the 400 follows the answers owed to the requests before it (uvicorn's went at once, read
  by the client as the answer to the request before); an app reading the body the parser failed in is
  told the client is gone.
- Framing the parser leaves to its caller (RFC 9112, 9110), refused or done here:
  - The sidecar never switches protocols. llhttp ends a request asking to (Connection: upgrade, Upgrade;
    CONNECT) at its head, whatever its Content-Length or chunked body, and uvicorn only warned and parsed
    the next read afresh: the body was read as a request of its own (a send nobody made). Such a request
    with a body is answered 400; one without is answered with ``connection: close``; either way nothing
    after its head is parsed (see on_headers_complete).
  - An HTTP/1.0 request's ``Expect: 100-continue`` is ignored: no 1xx goes to an HTTP/1.0 client.
  - An absolute-form target's host is the request's Host (RFC 9112 3.2.2: the Host field is ignored
    then), so the Host guard checks the host the client named; absent or repeated Host fields are refused
    by the edge (app.api.middleware).
  - A chunked body's trailer fields are counted against MAX_HEADER_FIELDS but never join the request's
    header fields (uvicorn appended them to the scope's headers: an ``authorization`` trailer passed the
    token check).
- One write per answer: uvicorn writes an answer's head and its body separately, two system calls (a
  sixth of the sidecar's time under load, issue 18); writes are held until the loop's next turn and
  sent as one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, cast

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .middleware import REFUSED, UNMATCHED, Refusal, answer_refusal, problem_body
from .problems import PROBLEM_JSON

LINGER_S = 1.0
MAX_HEAD = 64 * 1024  # bytes of a request's head (its URL and header fields) read before it is refused
# Header fields of one request: Apache httpd's LimitRequestFields and Tomcat's maxHeaderCount default to
# 100 too (nginx and h11 bound only the head's bytes). A browser sends some 20, a client library fewer.
MAX_HEADER_FIELDS = 100
DEFAULT_MAX_CONNECTIONS = 4096
PROBLEM_JSON_BYTES = PROBLEM_JSON.encode("latin-1")
STATUS_LINE = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode("latin-1")) for s in HTTPStatus}

_default: tuple[object, bytes] = (None, b"")


def default_head(headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (date, server) as a head's lines, built again only when uvicorn replaces
    the list (once a second, for the date) rather than per answer."""
    global _default
    source, head = _default
    if source is not headers:
        head = b"".join(b"%s: %s\r\n" % pair for pair in headers)
        _default = (headers, head)
    return head


class LazyDeadline:
    """One deadline per connection on one timer, re-armed lazily: arming and cancelling a timer for every
    request cost 1.3 us each (uvloop), on every request of a busy connection. The timer fires at most once
    per period while requests keep coming; it is moved only when a deadline is earlier than its own."""

    __slots__ = ("_deadline", "_expired", "_loop", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, expired: Callable[[], None]) -> None:
        self._loop, self._expired = loop, expired
        self._deadline: float | None = None  # None: nothing being timed
        self._timer: asyncio.TimerHandle | None = None

    @property
    def timing(self) -> bool:
        return self._deadline is not None

    def set(self, after_s: float) -> None:
        self._deadline = deadline = self._loop.time() + after_s
        timer = self._timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(deadline, self._check)

    def clear(self) -> None:
        self._deadline = None  # the pending timer, if any, finds nothing to time and stops

    def stop(self) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        if self._loop.time() < deadline:  # a later request moved it: wait for that one
            self._timer = self._loop.call_at(deadline, self._check)
            return
        self._deadline = None
        self._expired()


class _LingeringTransport:
    """The real transport, except that ``close()`` lingers while the request body is arriving, and writes
    made in one turn of the loop go out as one."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedHttpTools) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False
        self._held: list[bytes] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = [data]
            self._protocol.loop.call_soon(self.flush)
        else:
            self._held.append(data)

    def write_now(self, data: bytes) -> None:
        """Write at once, after whatever is held: for an answer that nothing else in the loop's turn
        could join."""
        if self._held is not None:
            self._held.append(data)
            self.flush()
        elif not self.is_closing():
            self._transport.write(data)

    def flush(self) -> None:
        # Nothing goes out once closing, lingering included: its FIN is sent, and the request it reads
        # on (only to drain it) may still be answered by uvicorn (a 400 for what follows a refused
        # head), which the transport refused with "Cannot call write() after write_eof()", logged as
        # an error for each such connection.
        held, self._held = self._held, None
        if held and not self.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        self.flush()  # what was written goes out before the FIN
        if self.is_closing():
            if not self._transport.is_closing() and not self.lingering:
                self._transport.close()
            return
        if self._protocol.body_arriving() and self._transport.can_write_eof():
            self.lingering = True
            self._transport.write_eof()  # the answer, then FIN
            self._transport.resume_reading()
            self._protocol.loop.call_later(LINGER_S, self._transport.close)
            return
        self._transport.close()


_HEAD_TOO_LARGE = Refusal(
    431, "Request header fields too large", f"the request's head is over {MAX_HEAD} bytes", "headers", {}
)
TOO_MANY_FIELDS = Refusal(
    431, "Request header fields too large", f"the request has over {MAX_HEADER_FIELDS} header fields",
    "headers", {},
)  # fmt: skip
# What httptools could not parse (a request line, a header field, a Content-Length, the chunked framing):
# uvicorn tells no more than that either.
MALFORMED = Refusal(400, "Bad request", "the request is not valid HTTP and cannot be read", "", {})
UPGRADE_WITH_BODY = Refusal(
    400, "Bad request",
    "the sidecar does not switch protocols (Upgrade), and a request asking it to may have no body",
    "Upgrade", {},
)  # fmt: skip


def refusal_bytes(refusal: Refusal, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """A whole answer to ``refusal`` that closes the connection, as uvicorn would write it."""
    body = problem_body(refusal)
    head = STATUS_LINE[refusal.status] + default_head(default_headers)
    head += b"content-type: %s\r\ncontent-length: %d\r\n" % (PROBLEM_JSON_BYTES, len(body))
    for name, value in refusal.headers.items():
        head += b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1"))
    return b"".join([head, b"connection: close\r\n\r\n", body])


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's head (lower-case names, as the parser checked them) announces a body."""
    return any(
        name == b"transfer-encoding" or (name == b"content-length" and value.strip().lstrip(b"0") != b"")
        for name, value in headers
    )


def _target_authority(url: bytes) -> bytes:
    """An absolute-form target's host (and port) as a Host field value: ``[::1]:9880``, ``a.example``. One
    without a host is not a request any server reads: refused 400 as the parser's failures are."""
    parsed = httptools.parse_url(url)  # raises for what is no URL: uvicorn's send_400_response
    host = parsed.host
    if not host:
        raise ValueError("an absolute-form target without a host")
    if b":" in host:
        host = b"[%s]" % host
    return host if parsed.port is None else b"%s:%d" % (host, parsed.port)


def _open_part(data: bytes) -> int:
    """The bytes of ``data`` that belong to the head begun in it and still open at its end: those after the
    last head's end (a head holds no CRLF CRLF; httptools wants CRLFs). Exact unless the body of a pipelined
    request lies between them: then that is counted too."""
    end = data.rfind(b"\r\n\r\n")
    return len(data) if end < 0 else len(data) - end - 4


class _TooManyFields(Exception):
    """Raised from the parser's header callback: httptools stops parsing, uvicorn calls send_400_response."""


class ConnectionLimit:
    """At most ``most`` open HTTP connections (uvicorn's server state's set, which both protocols join).
    A connection past it is answered 503 problem+json with ``connection: close`` and counted
    (``refused``): the answer is one prebuilt write, no parser, no task, so refusing costs less than
    the accept did. It is then half-closed and what the client sends is read and dropped for LINGER_S
    (closed at once, the client's kernel would reset the connection and drop the answer unread), unless
    ``most`` refused ones linger already: then it is closed at once, so a flood holds at most twice
    ``most`` sockets."""

    def __init__(self, most: int, refused: Callable[[], None] = lambda: None) -> None:
        self.most = most
        self.refused = refused
        self.lingering = 0
        self.refusal = Refusal(
            503, "Service unavailable", f"the sidecar has {most} HTTP connections open (max_connections)",
            "", {"retry-after": "1"},
        )  # fmt: skip

    def admits(self, connections: set[Any], transport: asyncio.Transport, server_state: Any) -> bool:
        """Whether a new connection may join ``connections``; if not, ``transport`` is refused."""
        if len(connections) < self.most:
            return True
        self.refused()
        refused = _Refused(self)
        transport.set_protocol(refused)
        refused.connection_made(transport, refusal_bytes(self.refusal, server_state.default_headers))
        return False


class _Refused(asyncio.Protocol):
    """A connection past the limit: answered, then closed (see ConnectionLimit)."""

    def __init__(self, limit: ConnectionLimit) -> None:
        self._limit = limit
        self._lingers = False

    def connection_made(self, transport: asyncio.BaseTransport, answer: bytes = b"") -> None:
        t = cast(asyncio.Transport, transport)
        t.write(answer)
        if self._limit.lingering < self._limit.most and t.can_write_eof():
            self._limit.lingering += 1
            self._lingers = True
            t.write_eof()
            asyncio.get_running_loop().call_later(LINGER_S, t.close)
        else:
            t.close()

    def data_received(self, data: bytes) -> None:
        pass  # dropped

    def eof_received(self) -> bool:
        return False  # the client is done: close now

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lingers:
            self._lingers = False
            self._limit.lingering -= 1


class GuardedHttpTools(HttpToolsProtocol):
    read_timeout_s = 30.0
    limit: ConnectionLimit | None = None
    # (route template, status): the edge's count of requests (rocksidecar_requests_total), for what this
    # refuses before any route sees it; None where nothing counts them (the dmq process's port)
    count_refusal: Callable[[str, int], None] | None = None
    handed_over = False  # set by app.api.hot_http: the connection was counted and admitted there
    _fields = 0  # header fields of the head being read
    _pending: Refusal | None = None  # a head refused while answers before it were owed
    _refused: Any = None  # the cycle of a queued request whose body the parser failed on: refused in its turn
    _read: LazyDeadline | None = None
    _lingering: _LingeringTransport | None = None
    # Bytes of the open head read so far (at least: see _open_part); None: no head open. A head that
    # begins and ends in one read of at most MAX_HEAD bytes is within the bound, so such a read (the common
    # one: whole requests well under MAX_HEAD) costs one comparison; any other read is fed in pieces that
    # end where an open head would pass MAX_HEAD (_feed_bounded).
    _head: int | None = None
    _begun = 0  # requests begun on this connection
    # A request asked to switch protocols (on_headers_complete): nothing read after its head is parsed.
    _upgraded = False
    _upgrade_refused = False  # ... and it had a body: refused, no cycle of its own

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        limit = None if self.handed_over else self.limit
        if limit is not None and not limit.admits(self.connections, transport, self.server_state):
            return
        self._lingering = _LingeringTransport(transport, self)
        super().connection_made(cast(asyncio.Transport, self._lingering))
        self._read = LazyDeadline(self.loop, self._timed_out)
        self._read.set(self.read_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._upgraded or (self._lingering is not None and self._lingering.lingering):
            return  # dropped: the answer is out (or what follows an upgrade's head), nothing more is parsed
        if self._head is None and len(data) <= MAX_HEAD:
            super().data_received(data)
            if self._head is not None:  # a head began in this read and is still open
                self._head = _open_part(data)
        else:
            self._feed_bounded(data)

    def _feed_bounded(self, data: bytes) -> None:
        """Feed ``data`` (a read over MAX_HEAD bytes, or one that goes on an open head, app.api.hot_http's
        handover included) in pieces: none longer than MAX_HEAD, none past the bytes the open head may still
        have. So a head ends within MAX_HEAD bytes, or is still open at MAX_HEAD with bytes to come: 431."""
        at, end = 0, len(data)
        while at < end:
            head, begun = self._head, self._begun
            if head is not None and head >= MAX_HEAD:  # more bytes of a head that has MAX_HEAD already
                if not self.transport.is_closing():
                    self._refuse_head(_HEAD_TOO_LARGE)
                return
            piece = data[at : at + MAX_HEAD - (head or 0)]
            at += len(piece)
            super().data_received(piece)
            if self.transport.is_closing() or self.parser.should_upgrade():
                return  # a 400 closed it, or an upgrade paused the parser: the rest unparsed, as uvicorn's
            if self._head is None:
                continue
            if head is not None and self._begun == begun:  # the same head, still open
                self._head = head + len(piece)
            else:  # one begun in this piece
                self._head = _open_part(piece)

    def body_arriving(self) -> bool:
        """A request is arriving: its body, or its head (a 431 or a timeout closes while it does), or what
        a client sends after asking to upgrade (its body, a pipelined request: never read)."""
        return self._head is not None or self._upgraded or (self.cycle is not None and self.cycle.more_body)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head = 0
        self._fields = 0
        self._begun += 1
        if self._read is not None and not self._read.timing:
            self._read.set(self.read_timeout_s)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > MAX_HEADER_FIELDS:
            raise _TooManyFields  # parsing stops here; uvicorn calls send_400_response
        if self._head is not None:  # None: the head is complete, this is a chunked body's trailer field
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head = None
        url = self.url
        if url[:1] != b"/" and url != b"*":  # absolute-form (RFC 9112 3.2.2): its host, not Host's, counts
            self._target_is_host(url)
        if self.parser.should_upgrade():
            self._upgrade()
            return
        super().on_headers_complete()
        if self.expect_100_continue and self.parser.get_http_version() != "1.1":
            # RFC 9110 10.1.1, 15.2: an HTTP/1.0 client's 100-continue is ignored, it is sent no 1xx
            self.cycle.waiting_for_100_continue = False

    def _target_is_host(self, url: bytes) -> None:
        """An absolute-form target's host replaces the request's Host (RFC 9112 3.2.2), so that the Host
        guard checks the host the client named, not a loopback Host beside it. In the scope's list
        (uvicorn's ``headers``), each Host field is replaced: the edge refuses none or several in HTTP/1.1
        all the same (RFC 9112 3.2); an HTTP/1.0 request without one gets the target's."""
        authority = _target_authority(url)
        headers = self.headers
        hosts = [at for at, (name, _) in enumerate(headers) if name == b"host"]
        for at in hosts:
            headers[at] = (b"host", authority)
        if not hosts and self.parser.get_http_version() != "1.1":
            headers.append((b"host", authority))

    def _upgrade(self) -> None:
        """A request asking to switch protocols, which the sidecar never does (RFC 9110 7.8 lets it go on in
        HTTP/1.1). llhttp has ended its message at its head and stops parsing there (uvicorn warns and
        drops the rest of the read), whatever body it announced: parsed from the next read, that body was
        a request of its own. So nothing after its head is read (data_received), and the connection closes
        after its answer (lingering: the client may be sending still): with a body it is refused 400, else
        answered as it would be, with ``connection: close`` (a request pipelined behind it was never
        read, and the client, told, sends it again on a new connection). (uvicorn's own websocket upgrade
        is off: app.api.servers' ws="none", so its on_headers_complete makes the cycle.)"""
        self._upgraded = True
        if _has_body(self.headers):
            self._upgrade_refused = True
            self._refuse_head(UPGRADE_WITH_BODY)
            return
        super().on_headers_complete()
        self.cycle.keep_alive = False

    def send_400_response(self, msg: str) -> None:
        """The parser failed (uvicorn's call): it cannot go on. The refusal keeps the answers' order: it
        follows the answers owed to the requests read before the failing bytes."""
        # Over MAX_HEADER_FIELDS fields: in a head, or in a chunked body's trailer (the parser's on_header
        # counts trailer fields too); else bytes it cannot read.
        refusal = TOO_MANY_FIELDS if self._fields > MAX_HEADER_FIELDS else MALFORMED
        cycle = self.cycle
        if self._head is not None or cycle is None or not cycle.more_body or cycle.response_complete:
            # The failing bytes begin a request of their own (a head; a body no one reads any more): its
            # refusal waits for the answers owed before it.
            self._refuse_head(refusal)
        elif self.pipeline and self.pipeline[0][0] is cycle:
            # They are the body of a request queued behind answers still owed (its app not started):
            # in its turn it is refused in its app's place. Waiting for its body would wait until the
            # read timeout: the parser reads no more of it.
            self.pipeline[0] = (cycle, self._refusing_app(cycle, refusal))
            self._refused = cycle
            self._parked()
        else:
            # They are the body of the request whose app runs (every earlier answer is out: its app
            # started after them). Its app is told the client is gone, as on a lost connection (its
            # receive gets http.disconnect, its writes are dropped), and the refusal goes at once,
            # counted here (the scope is marked so that the edge does not count the disconnect as the
            # client's, 499): it cannot follow an answer the app began, so then the connection only
            # closes.
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
            else:
                cast(dict[str, Any], cycle.scope)[REFUSED] = True
                self._refuse_now(refusal)

    def _parked(self) -> None:
        """A refusal waits for the answers owed before it: read no more, and time nothing. The client has
        sent all of the refused request the parser will read; the answers owed are bounded by their apps'
        own timeouts, and the read deadline armed at the refused request's first byte would close the
        connection under them (the client, never answered, would send again: a duplicate)."""
        self.flow.pause_reading()
        if self._read is not None:
            self._read.clear()

    def _refusing_app(self, cycle: Any, refusal: Refusal) -> Callable[[Any, Any, Any], Awaitable[None]]:
        """An ASGI application answering ``refusal`` on ``cycle`` (closing the connection), counted as
        _refuse_now's unless the client was gone (or a later read refused it at once: it is counted there)."""

        async def refuse(scope: Any, receive: Any, send: Any) -> None:
            await answer_refusal(send, refusal, {"connection": "close"})
            if self.count_refusal is not None and not cycle.disconnected:
                self.count_refusal(UNMATCHED, refusal.status)

        return refuse

    def _refuse_head(self, refusal: Refusal) -> None:
        """Answer ``refusal`` and close, once the answers owed before it are out; until then read no more."""
        if self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            self._pending = refusal
            self._parked()  # on_response_complete refuses it
            return
        self._refuse_now(refusal)

    def _refuse_now(self, refusal: Refusal) -> None:
        """Answer ``refusal``, close, and count it as a request no route matched (none was routed)."""
        self.transport.write(refusal_bytes(refusal, self.server_state.default_headers))
        self.transport.close()
        if self.count_refusal is not None:
            self.count_refusal(UNMATCHED, refusal.status)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.pipeline:  # uvicorn resumed reading: not while requests already read wait their turn
            self.flow.pause_reading()
        elif self._pending is not None:
            self._refuse_head(self._pending)

    def on_message_complete(self) -> None:
        if self._upgrade_refused:
            return  # no cycle of its own: self.cycle is the request's before it
        super().on_message_complete()
        if self._read is not None:
            self._read.clear()

    def eof_received(self) -> bool:  # type: ignore[override]  # uvicorn's: None (closes)
        """The client half-closed (``shutdown(SHUT_WR)``, ``nc -N``, some proxies): it sends nothing more
        but reads on. uvicorn's returns None, so the transport closed here, and an answer owed (its app
        going on: a send delivered and counted 200) was never written: the client, unanswered, sends
        again. What it sent whole is answered, the last answer with ``connection: close``, then the
        connection closes; a request it left unfinished never will be: with nothing owed before it (or
        nothing at all), the connection closes now."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self.transport.is_closing():
            return self._closed_at_eof()  # nothing owed (what is lingering has nothing more to drain)
        if self._read is not None:
            self._read.clear()  # nothing more arrives to be timed; the answers owed bound themselves
        if self._pending is not None or cycle is self._refused:
            return True  # a refusal follows the answers owed, and closes
        if not cycle.more_body:  # the newest request was sent whole (a head begun after it never ends)
            cycle.keep_alive = False  # its answer says so and closes
            return True
        # The newest request's body will not end.
        if self.pipeline and self.pipeline[0][0] is cycle:
            # It waits behind answers owed: in its turn the connection closes instead of its app.
            self.pipeline[0] = (cycle, self._closing_app(cycle))
            return True
        return self._closed_at_eof()  # its app runs (nothing owed before it): it is told the client is gone

    def _closed_at_eof(self) -> bool:
        """eof_received's False (the transport closes): what is held goes out first."""
        if self._lingering is not None:
            self._lingering.flush()
        return False

    def _closing_app(self, cycle: Any) -> Callable[[Any, Any, Any], Awaitable[None]]:
        """An ASGI application, in place of the one of a request whose body will not come, that closes the
        connection without an answer (as if the client were gone: run_asgi writes nothing then)."""

        async def close(scope: Any, receive: Any, send: Any) -> None:
            cycle.disconnected = True
            self.transport.close()

        return close

    def connection_lost(self, exc: Exception | None) -> None:
        if self._read is not None:
            self._read.stop()
        super().connection_lost(exc)

    def _timed_out(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()  # the route, if any, sees a client disconnect
