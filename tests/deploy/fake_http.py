"""A tiny threaded HTTP server on 127.0.0.1:0 answering from a {path: (status, body)} table."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

# Straight to the server, whatever HTTP(S)_PROXY the environment has: as kubelet's probes and a scraper.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="this host has no IPv6 loopback")


@contextmanager
def serve(
    routes: dict[str, tuple[int, bytes]], token: str = ""
) -> Iterator[tuple[int, list[dict[str, str]]]]:
    """Yield (port, seen request headers). With ``token``, a request without that bearer gets 401."""
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(dict(self.headers))
            status, body = routes.get(self.path, (404, b"not found"))
            if token and self.headers.get("Authorization") != f"Bearer {token}":
                status, body = 401, b"unauthorized"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
