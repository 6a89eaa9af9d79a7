"""A threaded HTTP/1.1 server on 127.0.0.1:0 whose answers come from a Python function, for fakes of
the sidecar and for a fault-injecting proxy in front of the real one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    peer: tuple[str, int]
    server_port: int


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


# None: close the connection without answering (the client sees the server disconnect)
Handler = Callable[[Request], Reply | None]


@contextmanager
def serve(handler: Handler) -> Iterator[str]:
    """Run ``handler`` behind a server; yield its base URL."""

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the sidecar's clients use it

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            parts = urlsplit(self.path)
            request = Request(
                self.command,
                parts.path,
                parts.query,
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length),
                (str(self.client_address[0]), int(self.client_address[1])),
                server_port,
            )
            reply = handler(request)
            if reply is None:
                self.close_connection = True
                return
            self.send_response(reply.status)
            for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        do_GET = do_POST = _any

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server_port = int(server.server_address[1])
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
