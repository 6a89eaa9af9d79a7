"""What tracing costs (issue 31), in one run on the real broker: the sidecar's x32 single-message HTTP
rate with every request carrying a W3C traceparent, (1) tracing off (the anchor), (2) OpenTelemetry spans
on, exported by the SDK's batching processor over OTLP/HTTP to a local sink that accepts everything, (3)
RocketMQ message trace on (Pub records to RMQ_SYS_TRACE_TOPIC). Also (0) off without the header, to show
that carrying a trace context costs nothing measurable. Each process is fresh; ratios are to (1).

    .venv/bin/python -m bench.tracing [--namesrv 127.0.0.1:9876] [--seconds 10]

Needs the otel extra in .venv (make install has it) and wrk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import Row, environment, print_rows
from bench.compare import BODY, Measured, wrk
from bench.sidecar_process import sidecar_process

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every export (so the exporter's cost is the sidecar's own)."""

    spans_bytes = 0

    def do_POST(self) -> None:
        n = int(self.headers.get("content-length") or 0)
        _Sink.spans_bytes += len(self.rfile.read(n))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def measure(
    namesrv: str, topic: str, seconds: float, header: bool, env: dict[str, str], **settings: str
) -> Measured:
    single = json.dumps({"topic": topic, "body": BODY}).encode()
    saved = {k: os.environ.get(k) for k in ("TRACEPARENT", *env)}
    os.environ.update(env)
    if header:
        os.environ["TRACEPARENT"] = TRACEPARENT
    else:
        os.environ.pop("TRACEPARENT", None)
    try:
        with (
            tempfile.TemporaryDirectory() as data,
            sidecar_process(namesrv, Path(data), **settings) as (url, proc),
        ):
            wrk(url, proc.pid, "/v1/messages", single, 8, 2, 1)  # warm up
            return wrk(url, proc.pid, "/v1/messages", single, 32, seconds, 1)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    topic = f"traceBench{int(time.time())}"
    print(f"bench.tracing: topic {topic}; {environment()}", flush=True)
    with otlp_sink() as sink:
        otel_env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": sink}
        bare = measure(args.namesrv, topic, args.seconds, False, {})  # first: it also creates the topic
        off = measure(args.namesrv, topic, args.seconds, True, {})
        otel = measure(args.namesrv, topic, args.seconds, True, otel_env, OTEL="true")
        msg = measure(args.namesrv, topic, args.seconds, True, {}, MSG_TRACE="true")
    rows = [
        Row("x32 single, traceparent, tracing off (anchor)", off.rate, "msg/s", off.rate),
        Row("x32 single, no traceparent, tracing off", bare.rate, "msg/s", off.rate),
        Row("x32 single, traceparent, OTel spans on (OTLP batching)", otel.rate, "msg/s", off.rate),
        Row("x32 single, traceparent, RocketMQ msg trace on", msg.rate, "msg/s", off.rate),
        Row("CPU per 100k, tracing off", off.cpu_per_100k, "s", off.cpu_per_100k),
        Row("CPU per 100k, OTel spans on", otel.cpu_per_100k, "s", off.cpu_per_100k),
        Row("CPU per 100k, msg trace on", msg.cpu_per_100k, "s", off.cpu_per_100k),
    ]
    print_rows("tracing cost (ratios to tracing off)", rows)
    print(f"OTLP sink received {_Sink.spans_bytes} bytes")
    for name, m in (("off", off), ("bare", bare), ("otel", otel), ("msgtrace", msg)):
        if m.note:
            print(f"note {name}: {m.note}")


if __name__ == "__main__":
    main()
