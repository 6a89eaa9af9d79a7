"""A tiny app for `make run`: receives the sidecar's subscription POSTs (CloudEvents, binary mode) on
127.0.0.1:PORT, prints one line per message and answers 204. Standard library only.

    python tools/echo_app.py 9890
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        h = self.headers
        print(
            f"received id={h.get('ce-id')} topic={h.get('ce-rocketmqtopic')} tags={h.get('ce-rocketmqtags')} "
            f"queue={h.get('ce-rocketmqbroker')}/{h.get('ce-rocketmqqueue')} "
            f"offset={h.get('ce-rocketmqoffset')} "
            f"reconsume={h.get('ce-rocketmqreconsumetimes')} content-type={h.get('content-type')} "
            f"body={body[:80]!r}",
            flush=True,
        )
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9890
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
