"""A stand-in for the app behind a subscription: an HTTP server on 127.0.0.1:0 (in a thread) that
records every POST and answers what ``answer`` says for the n-th one (0-based)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (status, extra headers, seconds to hold the answer: the app being slow)
Answer = tuple[int, dict[str, str], float]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class PushApp:
    port: int = 0
    answer: Callable[[int], Answer] = lambda n: (204, {}, 0.0)
    got: list[Received] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    release: threading.Event = field(default_factory=threading.Event)  # ends every slow answer at once
    respond: Callable[[bytes], bytes] | None = None  # the answer's body from the request's (bulk)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def _record(self, received: Received) -> None:
        self.got.append(received)
        self._changed.set()

    async def until(self, done: Callable[[list[Received]], bool], timeout_s: float = 15.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not done(self.got):
                self._changed.clear()
                await self._changed.wait()


@contextmanager
def push_app(answer: Callable[[int], Answer] | None = None) -> Iterator[PushApp]:
    app = PushApp()
    if answer is not None:
        app.answer = answer
    app._loop = asyncio.get_running_loop()
    count = 0
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the sidecar's client expects

        def do_POST(self) -> None:
            nonlocal count
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                n = count
                count += 1
            status, headers, hold_s = app.answer(n)
            if hold_s:
                app.release.wait(hold_s)
            received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            assert app._loop is not None
            app._loop.call_soon_threadsafe(app._record, received)
            out = app.respond(body) if app.respond is not None else b""
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    app.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield app
    finally:
        app.release.set()
        server.shutdown()
        server.server_close()
