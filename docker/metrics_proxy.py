"""Serve only GET /metrics of the loopback-bound sidecar on a port Prometheus can reach.

rocksidecar serves /metrics on its HTTP API listener, which stays on 127.0.0.1 so that nothing outside
the pod can send messages through it. The Helm chart runs this next to the sidecar when metrics are
scraped; every other path answers 404, so the pod IP exposes metrics and nothing else.

--listen [::]:PORT (the chart's) is one dual-stack socket: it answers on an IPv4 and an IPv6 pod IP.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
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
# Straight to the sidecar on loopback, never through an HTTP(S)_PROXY of the environment: a proxy cannot
# reach the pod's loopback, and would be sent the sidecar's bearer token.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


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
                with _OPENER.open(request, timeout=TIMEOUT_S) as response:
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


class DualStackServer(ThreadingHTTPServer):
    """An IPv6 listener that takes IPv4 connections too (as IPv4-mapped addresses) on [::]."""

    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def build_server(listen: str, upstream: str, token: str) -> ThreadingHTTPServer:
    """Listen on ``listen``: host:port, the host an IPv4 or IPv6 address, bracketed or not."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    handler = make_handler(upstream, token)
    if ":" not in host:
        return ThreadingHTTPServer((host, int(port)), handler)
    try:
        return DualStackServer((host, int(port)), handler)
    except OSError as exc:
        # A kernel without IPv6 (ipv6.disable=1): the wildcard still means every address it has.
        if host == "::" and exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
            return ThreadingHTTPServer(("0.0.0.0", int(port)), handler)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--listen", default="[::]:9882", help="host:port to serve /metrics on ([::]: IPv4 and IPv6)"
    )
    parser.add_argument("--upstream", default="127.0.0.1:9880", help="the sidecar's HTTP host:port")
    args = parser.parse_args(argv)
    server = build_server(args.listen, args.upstream, os.environ.get(TOKEN_ENV, ""))
    host, port = str(server.server_address[0]), server.server_address[1]
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    print(f"metrics_proxy: GET /metrics on {where} from {args.upstream}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
