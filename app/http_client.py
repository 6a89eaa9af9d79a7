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
import contextlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools


class PostError(Exception):
    """No usable answer: connection refused or dropped, timeout, or a malformed response."""


# What the callers need. Not HEAD: the parser would wait for the body its Content-Length announces.
METHODS = frozenset({"GET", "POST"})


MAX_ANSWER_BYTES = 4 * 1024 * 1024  # an app's answer body beyond this is refused (PostError)
# The answer's status line and headers: an app streaming endless headers must not grow the sidecar
# (issue 27: 0.55 -> 4.1 GB in 15 s). A longer head fails the delivery and closes the connection.
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: bool
    head: bytes  # request line and Host header


class _Parsed:
    """httptools callbacks for one answer."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.header_count = 0
        self.head_done = False
        self.body: list[bytes] = []
        self.body_size = 0
        self.done = False
        self.keep_alive = False
        # parser -> self -> parser is a cycle: ``release`` breaks it, so what an answer held is freed at
        # once and not at the next (rare: service.py raises the thresholds) cyclic collection
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > MAX_HEADERS:
            raise PostError(f"the app's answer has more than {MAX_HEADERS} headers")
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, chunk: bytes) -> None:
        self.body_size += len(chunk)
        if self.body_size > MAX_ANSWER_BYTES:
            raise PostError(f"the app's answer is larger than {MAX_ANSWER_BYTES} bytes")
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        self.done = True
        # asked here: once feed_data returns, llhttp has reset and answers False for a body
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()

    def release(self) -> None:
        """Drop everything the answer held, also when a timeout or an error left it half read."""
        self.parser = None
        self.headers = {}
        self.body = []


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False  # a reused connection may have been closed by the app while idle

    async def exchange(self, request: bytes) -> tuple[Answer, bool]:
        """Send one request, read its whole answer; returns it and whether the connection stays open."""
        self.used = True
        self.writer.write(request)
        parsed = _Parsed()
        parser = parsed.parser
        assert parser is not None
        head_read = 0
        chunk = b""
        try:
            while not parsed.done:
                chunk = await self.reader.read(65536)
                if not chunk:
                    raise ConnectionResetError("the app closed the connection before answering")
                parser.feed_data(chunk)
                if not parsed.head_done:
                    # llhttp keeps a header it has not finished in its own buffer: count what was fed
                    head_read += len(chunk)
                    if head_read > MAX_HEAD_BYTES:
                        raise PostError(f"the app's answer head is larger than {MAX_HEAD_BYTES} bytes")
            body = b"".join(parsed.body)
            return Answer(parser.get_status_code(), parsed.headers, body), parsed.keep_alive
        finally:
            # a raised error's traceback keeps this frame (through a timeout's CancelledError, for as
            # long as the caller keeps the error): it must not keep the answer's bytes with it
            parsed.release()
            del parser
            chunk = b""

    def close(self) -> None:
        self.writer.close()


@dataclass(eq=False)
class _InFlight:
    deadline: float  # loop time
    task: asyncio.Task[Any]
    expired: bool = False  # the sweep cancelled the POST


class HttpClient:
    """POSTs time out by a sweep over the ones in flight (a quarter of the shortest timeout apart, at
    most SWEEP_MAX_S), not a timer per POST: that timer was a sixth of the push path's CPU."""

    SWEEP_MAX_S = 0.25

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int, bool], list[_Conn]] = {}
        self._targets: dict[str, _Target] = {}
        self._closed = False
        self._in_flight: set[_InFlight] = set()
        self._sweep_s = self.SWEEP_MAX_S
        self._sweeper: asyncio.Task[None] | None = None

    def _watch(self, timeout_s: float) -> _InFlight:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        slot = _InFlight(loop.time() + timeout_s, task)
        self._in_flight.add(slot)
        if timeout_s / 4 < self._sweep_s:
            self._sweep_s = max(timeout_s / 4, 0.001)
            if self._sweeper is not None:
                self._sweeper.cancel()  # restart at the shorter interval
                self._sweeper = None
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep_loop())
        return slot

    async def _sweep_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._sweep_s)
            now = loop.time()
            for slot in self._in_flight:
                if slot.deadline <= now and not slot.expired:
                    slot.expired = True
                    slot.task.cancel()

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

    async def _connect(self, t: _Target) -> _Conn:
        reader, writer = await asyncio.open_connection(t.host, t.port, ssl=t.tls or None)
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # one write per request already; NODELAY so a small POST never waits for a delayed ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(reader, writer)

    async def request(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float, method: str = "POST"
    ) -> Answer:
        """Send ``body`` (a POST unless ``method`` says GET); ``url`` may carry a query. Raises PostError
        when there is no answer within ``timeout_s``."""
        if self._closed:
            raise PostError("client closed")
        t = self._target(url)
        head = t.head  # built for POST, the hot path's method: another one changes the request line only
        if method != "POST":
            if method not in METHODS:
                raise ValueError(f"method {method!r} is not one of {', '.join(sorted(METHODS))}")
            head = method.encode("ascii") + head[4:]
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if lines.count("\n") != len(headers) or lines.count("\r") != len(headers):
            raise PostError("a header carries a line break")  # no header injection into the request
        request = b"".join(
            (head, lines.encode("latin-1", "replace"), b"content-length: %d\r\n\r\n" % len(body), body)
        )
        key = (t.host, t.port, t.tls)
        idle = self._idle.setdefault(key, [])
        slot = self._watch(timeout_s)
        try:
            while True:
                conn = idle.pop() if idle else await self._connect(t)
                reused = conn.used
                try:
                    answer, keep = await conn.exchange(request)
                except (OSError, httptools.HttpParserError) as exc:
                    conn.close()
                    if reused and isinstance(exc, ConnectionError):
                        continue  # the app dropped an idle connection: take another one
                    if isinstance(exc.__context__, PostError):  # a bound a parser callback enforced
                        raise PostError(str(exc.__context__)) from None
                    raise PostError(f"{type(exc).__name__}: {exc}") from exc
                except BaseException:  # timeout or cancel mid-answer: the connection is unusable
                    conn.close()
                    raise
                if keep and not self._closed:
                    idle.append(conn)
                else:
                    conn.close()
                return answer
        except asyncio.CancelledError:
            if not slot.expired:
                raise
            slot.task.uncancel()  # the sweep's cancel was for this POST, not for its caller
            raise PostError(f"no answer within {timeout_s} s") from None
        except OSError as exc:  # connect failed
            raise PostError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._in_flight.discard(slot)
            # the raised error's traceback keeps this frame: without this, frame -> slot -> task -> error
            # is a cycle holding the half-read answer until a cyclic collection
            del slot

    post = request  # the subscriptions' name for it; an alias, so the hot path pays no extra call

    async def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
                with contextlib.suppress(Exception):
                    await conn.writer.wait_closed()
        self._idle.clear()
