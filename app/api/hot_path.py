"""The two hot routes answered by the HTTP protocol itself, without an ASGI request cycle (issue 18).

uvicorn spends a scope, an event, a request-response cycle, two ASGI messages and their header checks on
every request; under 32 connections that was a fifth of the sidecar's time. A ``POST /v1/messages`` or
``/v1/messages:batch`` that the edge admits (every guard passed, a Content-Length within its limit) is
read here and answered by the same route function the edge would call, with the same bytes uvicorn would
write: its default headers (date, server), the route's headers, and ``connection: close`` when the
client asked for it.

Everything else goes the ASGI way, which answers it as before: other routes, refused requests, chunked
bodies, ``Expect: 100-continue``, HTTP/1.0, and a request that arrives while an answer is still pending on
its connection (a pipelined one waits in uvicorn's queue behind the pending answer, so that answers keep
their order).
"""

from __future__ import annotations

from typing import Any, Protocol

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from .http_protocol import GuardedHttpTools
from .middleware import CLIENT_CLOSED, INTERNAL_ERROR, FastRoute, problem_body
from .problems import PROBLEM_JSON

_PROBLEM_JSON = PROBLEM_JSON.encode("latin-1")


class HotRoutes(Protocol):
    def admit(
        self, method: str, path: str, raw_headers: list[tuple[bytes, bytes]]
    ) -> tuple[FastRoute, dict[bytes, bytes]] | None: ...

    def count_as(self, template: str, status: int) -> None: ...


class _Hot:
    """A hot request being read: its route, headers, query and body so far."""

    __slots__ = ("chunks", "headers", "keep_alive", "path", "query", "route")

    def __init__(
        self, route: FastRoute, path: str, query: bytes, headers: dict[bytes, bytes], keep_alive: bool
    ) -> None:
        self.route, self.path, self.query, self.headers = route, path, query, headers
        self.keep_alive = keep_alive
        self.chunks: list[bytes] = []


class HotPathHttp(GuardedHttpTools):
    """GuardedHttpTools that answers admitted hot requests itself. ``hot``: the edge, or None (off)."""

    hot: HotRoutes | None = None
    _reading: _Hot | None = None  # a hot request whose body is arriving
    _answering: _Hot | None = None  # a hot request whose answer is pending

    def on_headers_complete(self) -> None:
        hot = self._admit()
        if hot is None:
            super().on_headers_complete()
        else:
            self._reading = hot

    def _admit(self) -> _Hot | None:
        if (
            self.hot is None
            or self._answering is not None
            or (self.cycle is not None and not self.cycle.response_complete)
            or self.expect_100_continue
            or self.root_path
            or self.parser.get_http_version() != "1.1"
            or self.parser.should_upgrade()
        ):
            return None
        parsed = httptools.parse_url(self.url)
        if b"%" in parsed.path:
            return None  # uvicorn decodes it; the ASGI way sees the decoded path
        path = parsed.path.decode("ascii")
        admitted = self.hot.admit(self.parser.get_method().decode("ascii"), path, self.headers)
        if admitted is None:
            return None
        route, headers = admitted
        return _Hot(route, path, parsed.query or b"", headers, self.parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if self._reading is not None:
            self._reading.chunks.append(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        hot, self._reading = self._reading, None
        if hot is None:
            super().on_message_complete()
            return
        self._disarm()
        self._answering = hot
        task = self.loop.create_task(self._answer(hot))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def body_arriving(self) -> bool:
        return self._reading is not None or super().body_arriving()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if self._answering is not None:  # pipelined behind a pending hot answer: wait, in order
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))
        else:
            super()._start_asgi_task(cycle, app)

    def shutdown(self) -> None:
        hot = self._answering or self._reading
        if hot is not None:
            hot.keep_alive = False  # read to its end and answered, then closed (as uvicorn's cycles are)
        else:
            super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._reading is not None and self.hot is not None:
            self.hot.count_as(self._reading.path, CLIENT_CLOSED)  # gone mid-body, as the edge counts it
            self._reading = None
        super().connection_lost(exc)

    async def _answer(self, hot: _Hot) -> None:
        assert self.hot is not None
        status = 500
        try:
            body = hot.chunks[0] if len(hot.chunks) == 1 else b"".join(hot.chunks)
            scope = {"type": "http", "method": "POST", "path": hot.path, "query_string": hot.query}
            status, payload, media, extra = await hot.route(scope, hot.headers, body)
            self._write(hot, status, payload, media.encode("latin-1"), extra)
        except Exception as exc:
            # As uvicorn does after an application error: logged, a 500 (problem+json, as the edge answers
            # it), the connection closed.
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            hot.keep_alive = False
            status = 500
            self._write(hot, 500, problem_body(INTERNAL_ERROR), _PROBLEM_JSON, {})
        finally:
            self.hot.count_as(hot.path, status)
            self._answering = None
            if not hot.keep_alive:
                self.transport.close()
            else:
                self.on_response_complete()  # uvicorn's: keep-alive timer, or the next pipelined request

    def _write(self, hot: _Hot, status: int, payload: bytes, media: bytes, extra: dict[str, str]) -> None:
        if self.transport.is_closing():
            return
        out = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            out += [name, b": ", value, b"\r\n"]
        for key, text in extra.items():
            out += [key.lower().encode("latin-1"), b": ", text.encode("latin-1"), b"\r\n"]
        out.append(b"content-length: %d\r\n" % len(payload))
        out += [b"content-type: ", media, b"\r\n"]
        if not hot.keep_alive:
            out.append(b"connection: close\r\n")
        out += [b"\r\n", payload]
        # With other answers in flight, held to the end of the loop's turn (app.api.http_protocol): written
        # at once under 32 connections, throughput fell 14 %. Alone (one connection), the wait for the
        # turn's end is pure latency: written at once, p99 1.9 -> 1.3 ms at one connection (issue 18).
        if len(self.tasks) > 1 or self._lingering is None:
            self.transport.write(b"".join(out))
        else:
            self._lingering.write_now(b"".join(out))
