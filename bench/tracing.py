"""What tracing costs (issue 31), in one run on the real broker: the sidecar's x32 single-message HTTP
rate and its CPU seconds per 100 000 messages, with every request carrying a sampled W3C traceparent:
(1) tracing off (the anchor), (2) OpenTelemetry spans on, exported by the SDK's batching processor over
OTLP/HTTP to a local sink that accepts everything, (3) RocketMQ message trace on (Pub records to
RMQ_SYS_TRACE_TOPIC). Also: off without the header (carrying a trace context costs nothing), and spans
on for requests the sampler leaves out (an unsampled traceparent; no traceparent under
``parentbased_traceidratio`` at 1 %), which must cost ~nothing. Each row is a fresh sidecar; the rows
rotate their order each round, and each figure is the median over the rounds of its ratio to (1) in the
same round (the raw figures are printed too).

    .venv/bin/python -m bench.tracing [--namesrv 127.0.0.1:9876] [--seconds 8] [--rounds 3]

Needs the otel extra in .venv (make install has it) and wrk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
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
UNSAMPLED = TRACEPARENT[:-2] + "00"


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
    namesrv: str, topic: str, seconds: float, traceparent: str | None, env: dict[str, str], **settings: str
) -> Measured:
    single = json.dumps({"topic": topic, "body": BODY}).encode()
    saved = {k: os.environ.get(k) for k in ("TRACEPARENT", *env)}
    os.environ.update(env)
    if traceparent is not None:
        os.environ["TRACEPARENT"] = traceparent  # bench.compare's wrk script sends it as a header
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


ANCHOR = "x32, traceparent, tracing off (anchor)"


def modes(sink: str) -> dict[str, tuple[str | None, dict[str, str], dict[str, str]]]:
    """Each row: the traceparent every request carries, the environment, the sidecar's settings."""
    otel = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": sink}
    ratio = {**otel, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}
    return {
        ANCHOR: (TRACEPARENT, {}, {}),
        "x32, no traceparent, tracing off": (None, {}, {}),
        "x32, traceparent, OTel spans on (OTLP batching)": (TRACEPARENT, otel, {"OTEL": "true"}),
        "x32, unsampled traceparent, OTel spans on": (UNSAMPLED, otel, {"OTEL": "true"}),
        "x32, no traceparent, OTel on, parentbased_traceidratio 0.01": (None, ratio, {"OTEL": "true"}),
        "x32, traceparent, RocketMQ msg trace on": (TRACEPARENT, {}, {"MSG_TRACE": "true"}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    topic = f"traceBench{int(time.time())}"
    print(f"bench.tracing: topic {topic}; {environment()}", flush=True)
    got: dict[str, list[Measured]] = {}
    with otlp_sink() as sink:
        rows = modes(sink)
        names = list(rows)
        measure(args.namesrv, topic, 2, None, {})  # creates the topic: no row pays for it
        for r in range(args.rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                traceparent, env, settings = rows[name]
                m = measure(args.namesrv, topic, args.seconds, traceparent, env, **settings)
                got.setdefault(name, []).append(m)
                print(f"round {r + 1}: {name}: {m.rate:,.0f} msg/s, {m.cpu_per_100k:.1f} cpu-s/100k"
                      f"{'; ' + m.note if m.note else ''}", flush=True)  # fmt: skip
    anchor = got[ANCHOR]
    rate_rows, cpu_rows = [], []
    for name in names:
        rates = [m.rate / a.rate for m, a in zip(got[name], anchor, strict=True)]
        cpus = [m.cpu_per_100k / a.cpu_per_100k for m, a in zip(got[name], anchor, strict=True)]
        rate = statistics.median(m.rate for m in got[name])
        cpu = statistics.median(m.cpu_per_100k for m in got[name])
        rate_rows.append(Row(name, 100 * statistics.median(rates), "%"))
        cpu_rows.append(Row(name, 100 * statistics.median(cpus), "%"))
        print(f"raw {name}: rates {[round(m.rate) for m in got[name]]} (median {rate:,.0f} msg/s), "
              f"cpu-s/100k {[round(m.cpu_per_100k, 1) for m in got[name]]} (median {cpu:.1f})")  # fmt: skip
    print_rows("x32 rate, % of the anchor's (median of the same-round ratios)", rate_rows)
    print_rows("sidecar CPU per message, % of the anchor's (median of the same-round ratios)", cpu_rows)
    print(f"OTLP sink received {_Sink.spans_bytes} bytes; {environment()}")


if __name__ == "__main__":
    main()
