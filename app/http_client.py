"""A minimal keep-alive HTTP/1.1 client, the one HTTP client of app/: the subscriptions' POSTs to the
app on localhost (the hot path), the dead-letter webhook (app.notify) and ``rocksidecar store`` against
a sidecar's admin API (app.store_remote). One request at a time per connection, idle connections pooled
per host, answers parsed by httptools (uvicorn's parser), the answer's head and body bounded.

Why not httpx: with 20 concurrent POSTs to a local app it spent most of the push path's CPU in its own
layers (about 600 req/s, issue 13); a POST here is one write of pre-built bytes and one parser feed.
The push contract needs the status and the headers (Retry-After); a bulk delivery also reads the
answer's body (the statuses per entry), kept up to MAX_ANSWER_BYTES. No proxies, no redirects, no
cookies: none of its callers needs them.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import NamedTuple
from urllib.parse import urlsplit

import httptools


class PostError(Exception):
    """No usable answer: connection refused or dropped, timeout, or a malformed response."""


# What the callers need. Not HEAD: the parser would wait for the body its Content-Length announces.
METHODS = frozenset({"GET", "POST"})


MAX_ANSWER_BYTES = 4 * 1024 * 1024  # an app's answer body beyond this is refused (PostError)
# The answer's status line and headers, and a chunked answer's trailers: an app streaming endless headers
# must not grow the sidecar (issue 27: 0.55 -> 4.1 GB in 15 s). A longer head fails the delivery and
# closes the connection.
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100


def are_header_lines(lines: bytes) -> bool:
    """Whether ``lines`` are ``name: value\\r\\n`` lines and nothing more: every CR and LF paired as
    one line end, no empty line (it would end the head early: header injection)."""
    breaks = lines.count(b"\r\n")
    return (
        lines.count(b"\n") == breaks
        and lines.count(b"\r") == breaks
        and lines[-2:] in (b"\r\n", b"")
        and lines[:2] != b"\r\n"
        and b"\r\n\r\n" not in lines
    )


def _is_interim(status: int) -> bool:
    """A 1xx answer other than 101 (Switching Protocols, which ends HTTP on the connection: an answer)."""
    return 100 <= status < 200 and status != 101


class CheckedLines(bytes):
    """Header lines whose maker vouches for what ``are_header_lines`` checks, so ``post_lines`` does not
    scan them again (five scans of a push's ~400 bytes were ~2.5 us of a POST, issue 32). Only for a
    maker that builds every line itself and checks each value it did not make for CR and LF
    (subscriptions.cloudevents.HeaderLines); anything else passes plain bytes and is checked."""

    __slots__ = ()


class _Headers(Mapping[str, str]):
    """The answer's headers, names lower-cased, decoded on first use: the push reads none of them on a
    2xx (only Retry-After on a 429/503), and decoding every header of every answer into a dict was ~3 us
    of a POST (issue 32)."""

    __slots__ = ("_dict", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._dict: dict[str, str] | None = None

    def _decoded(self) -> dict[str, str]:
        d = self._dict
        if d is None:
            d = self._dict = {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in self._raw}
            self._raw = []
        return d

    def __getitem__(self, name: str) -> str:
        return self._decoded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __repr__(self) -> str:
        return repr(self._decoded())


class Answer(NamedTuple):
    """The app's answer. A tuple: made once per POST on the hot path, where a frozen dataclass's
    ``__init__`` cost more than the rest of the answer's handling."""

    status: int
    headers: Mapping[str, str] = MappingProxyType({})  # names lower-cased
    body: bytes = b""


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: bool
    head: bytes  # request line and Host header


class _Conn(asyncio.Protocol):
    """One keep-alive connection: a protocol fed straight into its own httptools parser (one per
    connection, reset by llhttp between answers), no StreamReader in between. It also carries the
    timeout watch of the request it serves (``deadline``, ``timeout_s``): the client sweeps its
    connections, no object per POST."""

    def __init__(self, answer_limit: int = MAX_ANSWER_BYTES) -> None:
        self._answer_limit = answer_limit  # the client's: an answer body beyond it fails the request
        # made by loop.create_connection, so on the loop it serves. Kept: Python 3.11's
        # get_running_loop() makes a getpid system call every time, once per POST here (issue 32)
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.used = False  # a reused connection may have been closed by the app while idle
        self.lost = False
        self.deadline = 0.0  # loop time; meaningful while a request waits (``waiting``)
        self.timeout_s = 0.0  # that request's timeout, for the error
        self._waiter: asyncio.Future[None] | None = None
        self._failed = False
        # the answer being read
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_done = False
        self._head_read = 0  # the head's bytes, then the trailers': one bound for both
        # after a chunk's size line, no chunk data since: in the trailers if it was the last chunk (0)
        self._trailing = False
        self._body: list[bytes] = []
        self._body_size = 0
        self._done = False
        self._keep_alive = False
        # parser -> self -> parser is a cycle: ``release`` breaks it when the connection closes, so what
        # it held is freed at once and not at the next (rare: service.py raises the thresholds) collection
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if self._waiter is None or parser is None or self._failed or self._done:
            # idle, failed, or a whole answer already read: nobody asked for these bytes
            self._fail(ConnectionResetError("the app sent bytes nobody asked for"))
            return
        trailing, body_before = self._trailing, self._body_size
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # a 101 with Upgrade: not an Exception of the parser's errors
            self._fail(PostError("the app switched protocols (101): not an answer"))
            return
        except httptools.HttpParserError as exc:
            # a bound a callback enforced comes through the parser as its __context__; a fresh error
            # either way: the raised one's traceback holds this frame, the data and the connection
            bound = exc.__context__
            error = PostError(str(bound) if isinstance(bound, PostError) else f"{type(exc).__name__}: {exc}")
            del bound
            self._fail(error)
            return
        if not self._head_done:
            # llhttp keeps a header it has not finished in its own buffer: count what was fed
            self._head_read += len(data)
            if self._head_read > MAX_HEAD_BYTES:
                self._fail(PostError(f"the app's answer head is larger than {MAX_HEAD_BYTES} bytes"))
                return
        elif trailing and self._trailing and self._body_size == body_before:
            # A chunked answer's trailers are headers too: httptools appends an unfinished one in Python
            # (quadratic), and an app that ended its body and then streamed one endless trailer grew the
            # sidecar until the POST's timeout (~470 MiB with 20 POSTs). A read that began and ended
            # after a chunk's size line with no chunk data in it was all trailer (a chunk that was not the
            # last one would have had data): it counts, as a read that ended inside the head does. The
            # read that ended the body is not counted (its trailer part cannot be told from its chunk
            # framing), as the read that ends the head is not: the bound holds to within one read.
            self._head_read += len(data)
            if self._head_read > MAX_HEAD_BYTES:
                self._fail(
                    PostError(f"the app's answer head and trailers are larger than {MAX_HEAD_BYTES} bytes")
                )
                return
        if self._done and not self._waiter.done():
            self._waiter.set_result(None)

    def eof_received(self) -> bool:
        return False  # close: an answer is never completed by EOF (we always read framed answers)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self._done:
            self._fail(ConnectionResetError("the app closed the connection before answering"))
        if self._waiter is None:  # else an answer may be complete and not yet read: exchange releases
            self.release()

    # httptools callbacks ----------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._headers
        if len(headers) >= MAX_HEADERS:
            raise PostError(f"the app's answer has more than {MAX_HEADERS} headers")
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._head_done = True

    def on_chunk_header(self) -> None:
        self._trailing = True

    def on_chunk_complete(self) -> None:
        self._trailing = False

    def on_body(self, chunk: bytes) -> None:
        self._trailing = False
        self._body_size += len(chunk)
        if self._body_size > self._answer_limit:
            raise PostError(f"the app's answer is larger than {self._answer_limit} bytes")
        self._body.append(chunk)

    def on_message_complete(self) -> None:
        if self._done:  # two answers to one request in one read: the app is not speaking HTTP/1.1
            raise PostError("the app answered more than once")
        if self._parser is not None and _is_interim(self._parser.get_status_code()):
            # 100 Continue, 103 Early Hints: the final answer follows (RFC 9110 15.2). Taken as the answer,
            # the final one was read as the next request's on the pooled connection. Its bytes still
            # count toward MAX_HEAD_BYTES: endless interim answers fail the POST as an endless head does.
            self._headers = []
            self._head_done = False
            return
        self._done = True
        # asked here: once feed_data returns, llhttp has reset and answers False for a body
        self._keep_alive = self._parser is not None and self._parser.should_keep_alive()

    # the client's side ------------------------------------------------------------------------
    @property
    def open(self) -> bool:
        return not (self.lost or self._failed)

    @property
    def waiting(self) -> bool:
        """A request is waiting for its answer on this connection."""
        return self._waiter is not None and not self._waiter.done()

    def expire(self) -> None:
        """The waiting request ran past its deadline: it fails with PostError and the connection closes.
        Failing its waiter, not cancelling its task: no current_task() per POST, and an answer that is
        already complete is still returned."""
        self._fail(PostError(f"no answer within {self.timeout_s} s"))

    def _fail(self, exc: BaseException) -> None:
        # the error is not kept here: raised, its traceback holds the frames that hold this connection
        self._failed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()  # nothing more is read: a failed answer's bytes are not kept

    async def exchange(self, request: bytes) -> tuple[Answer, bool]:
        """Send one request, read its whole answer; returns it and whether the connection stays open."""
        if not self.open or self.transport is None:
            raise ConnectionResetError("the app closed the connection")
        self.used = True
        parser = self._parser
        assert parser is not None
        waiter = self._waiter = self.loop.create_future()
        self.transport.write(request)
        try:
            await waiter
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            answer = Answer(parser.get_status_code(), _Headers(self._headers), body)
            keep = self._keep_alive
        finally:
            # a raised error's traceback keeps this frame (through a timeout's PostError or a cancel, for
            # as long as the caller keeps the error): it must not keep the answer's bytes with it
            self._waiter = None
            self._headers = []
            self._body = []
            self._body_size = self._head_read = 0
            self._head_done = self._done = self._trailing = False
            if not self.open:
                self.release()
            del parser, waiter
        return answer, keep

    def release(self) -> None:
        """Drop everything the connection held, also when a timeout or an error left an answer half
        read."""
        self._parser = None
        self._headers = []
        self._body = []

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.release()


class HttpClient:
    """POSTs time out by a sweep over the connections (a quarter of the shortest timeout apart, at most
    SWEEP_MAX_S), not a timer per POST: that timer was a sixth of the push path's CPU."""

    SWEEP_MAX_S = 0.25

    def __init__(self, *, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        """``max_answer_bytes``: an answer body beyond this fails its request (PostError). A caller that
        reads no more than a status (the dead-letter webhook) or a small JSON (a transaction check) asks
        for less: each request waiting on a slow peer holds what its answer has sent so far."""
        self._max_answer_bytes = max_answer_bytes
        # the loop the client's connections live on, taken at its first request (a client serves one
        # loop, as its connections do): asking asyncio per POST cost a getpid system call (issue 32)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[tuple[str, int, bool], list[_Conn]] = {}
        self._targets: dict[str, _Target] = {}
        self._closed = False
        self._conns: set[_Conn] = set()  # every open connection, idle or busy: what the sweep reads
        self._sweep_s = self.SWEEP_MAX_S
        self._sweeper: asyncio.Task[None] | None = None

    def _watch(self, timeout_s: float) -> None:
        if timeout_s / 4 < self._sweep_s:
            self._sweep_s = max(timeout_s / 4, 0.001)
            if self._sweeper is not None:
                self._sweeper.cancel()  # restart at the shorter interval
                self._sweeper = None
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._sweep_s)
            now = loop.time()
            for conn in list(self._conns):  # expiring a connection may drop it from the set
                if conn.deadline <= now and conn.waiting:
                    conn.expire()

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https"):
                raise PostError(f"not an http or https URL: {url!r}")
            tls = parts.scheme == "https"
            host = parts.hostname or "localhost"
            port = parts.port or (443 if tls else 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            # user:password@ never goes into Host (a caller turns it into Authorization)
            head = f"POST {path} HTTP/1.1\r\nHost: {parts.netloc.rpartition('@')[2]}\r\n".encode("latin-1")
            target = self._targets[url] = _Target(host, port, tls, head)
        return target

    async def _connect(self, t: _Target, deadline: float) -> _Conn:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(deadline):
            _, conn = await loop.create_connection(
                partial(_Conn, self._max_answer_bytes), t.host, t.port, ssl=t.tls or None
            )
        assert conn.transport is not None
        sock = conn.transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # one write per request already; NODELAY so a small POST never waits for a delayed ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._closed:  # close() came while connecting: the connection is not its to drop
            conn.close()
            raise PostError("client closed")
        self._conns.add(conn)
        return conn

    def _request(self, url: str, lines: bytes, body: bytes, method: str) -> tuple[_Target, bytes]:
        """The request's bytes, after checking that ``lines`` are header lines and nothing more."""
        if type(lines) is not CheckedLines and not are_header_lines(lines):
            raise PostError("a header carries a line break")  # no header injection into the request
        t = self._target(url)
        head = t.head  # built for POST, the hot path's method: another one changes the request line only
        if method != "POST":
            if method not in METHODS:
                raise ValueError(f"method {method!r} is not one of {', '.join(sorted(METHODS))}")
            head = method.encode("ascii") + head[4:]
        return t, b"%s%scontent-length: %d\r\n\r\n%s" % (head, lines, len(body), body)

    def _drop(self, conn: _Conn) -> None:
        conn.close()
        self._conns.discard(conn)

    async def request(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float, method: str = "POST"
    ) -> Answer:
        """Send ``body`` (a POST unless ``method`` says GET); ``url`` may carry a query. Raises PostError
        when there is no answer within ``timeout_s``."""
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if lines.count("\n") != len(headers) or lines.count("\r") != len(headers):
            raise PostError("a header carries a line break")  # no header injection into the request
        return await self.post_lines(url, lines.encode("latin-1", "replace"), body, timeout_s, method)

    async def post_lines(
        self, url: str, lines: bytes, body: bytes, timeout_s: float, method: str = "POST"
    ) -> Answer:
        """``request`` with the headers already encoded as ``name: value\\r\\n`` lines (the hot path
        builds them once per message, not a mapping). Lines that are not exactly that are refused."""
        if self._closed:
            raise PostError("client closed")
        t, request = self._request(url, lines, body, method)
        idle = self._idle.get((t.host, t.port, t.tls))
        if idle is None:
            idle = self._idle[(t.host, t.port, t.tls)] = []
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        self._watch(timeout_s)
        conn: _Conn | None = None
        try:
            while True:
                if self._closed:
                    # close() dropped the connection this request was on: no new one after close(), its
                    # sweeper (the request's timeout) is gone
                    raise PostError("client closed")
                conn = idle.pop() if idle else await self._connect(t, deadline)
                if not conn.open:  # the app closed it while idle
                    self._drop(conn)
                    continue
                reused = conn.used
                conn.deadline, conn.timeout_s = deadline, timeout_s
                try:
                    answer, keep = await conn.exchange(request)
                except OSError as exc:
                    self._drop(conn)
                    if reused and isinstance(exc, ConnectionError):
                        continue  # the app dropped an idle connection: take another one
                    raise PostError(f"{type(exc).__name__}: {exc}") from exc
                except BaseException:  # a bound, a timeout or a cancel mid-answer: the connection is unusable
                    self._drop(conn)
                    raise
                if keep and not self._closed:
                    idle.append(conn)
                else:
                    self._drop(conn)
                return answer
        except TimeoutError:  # the connect ran past the deadline
            raise PostError(f"no answer within {timeout_s} s") from None
        except OSError as exc:  # connect failed
            raise PostError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            # the raised error's traceback keeps this frame: without this, frame -> conn -> waiter ->
            # error is a cycle holding the connection until a cyclic collection
            del conn

    post = request  # the subscriptions' name for it; an alias, so the hot path pays no extra call

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self._conns):
            self._drop(conn)
        self._idle.clear()
        self._loop = None
