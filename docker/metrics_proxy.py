"""Serve only GET /metrics of the loopback-bound sidecar on a port Prometheus can reach.

rocksidecar serves /metrics on its HTTP API listener, which stays on 127.0.0.1 so that nothing outside
the pod can send messages through it. The Helm chart runs this next to the sidecar when metrics are
scraped; every other path answers 404, so the pod IP exposes metrics and nothing else.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TIMEOUT_S = 10.0
TOKEN_ENV = "UPSTREAM_BEARER_TOKEN"  # the sidecar's API token, when it requires one
# Request headers worth passing on: content negotiation (OpenMetrics, gzip) only.
_FORWARD_REQUEST = ("Accept", "Accept-Encoding")
_FORWARD_RESPONSE = ("Content-Type", "Content-Encoding")


def make_handler(upstream: str, token: str) -> type[BaseHTTPRequestHandler]:
    class MetricsOnly(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            request = urllib.request.Request(f"http://{upstream}/metrics")
            for name in _FORWARD_REQUEST:
                if self.headers.get(name):
                    request.add_header(name, self.headers[name])
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                    self._reply(response.status, response.headers, response.read())
            except urllib.error.HTTPError as exc:
                self._reply(exc.code, exc.headers, exc.read())
            except OSError as exc:
                self.send_error(502, f"sidecar unreachable: {exc}")

        def _reply(self, status: int, headers: Message, body: bytes) -> None:
            self.send_response(status)
            for name in _FORWARD_RESPONSE:
                value = headers.get(name)
                if value:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape is noise; errors reach Prometheus as failed scrapes

    return MetricsOnly


def build_server(listen: str, upstream: str, token: str) -> ThreadingHTTPServer:
    host, _, port = listen.rpartition(":")
    return ThreadingHTTPServer((host, int(port)), make_handler(upstream, token))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", default="0.0.0.0:9882", help="host:port to serve /metrics on")
    parser.add_argument("--upstream", default="127.0.0.1:9880", help="the sidecar's HTTP host:port")
    args = parser.parse_args(argv)
    server = build_server(args.listen, args.upstream, os.environ.get(TOKEN_ENV, ""))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
