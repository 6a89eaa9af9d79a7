"""What tracing costs (issue 31), in one run on the real broker: the sidecar's x32 single-message HTTP
rate and its CPU seconds per 100 000 messages, with every request carrying a sampled W3C traceparent:
(1) tracing off (the anchor), (2) OpenTelemetry spans on, exported by the SDK's batching processor over
OTLP/HTTP to a local sink that accepts everything, (3) RocketMQ message trace on (Pub records to
RMQ_SYS_TRACE_TOPIC). Also: off without the header (carrying a trace context costs nothing), and spans
on for requests the sampler leaves out (an unsampled traceparent; no traceparent under
``parentbased_traceidratio`` at 1 %), which must cost ~nothing, and the documented production setting:
no traceparent under ``parentbased_traceidratio`` at ``--ratio`` (default 0.05: that share of the
requests sampled, the rest on the sample-free path). Each row is a fresh sidecar; the rows
rotate their order each round, and each figure is the median over the rounds of its ratio to (1) in the
same round (the raw figures are printed too).

    .venv/bin/python -m bench.tracing [--namesrv 127.0.0.1:9876] [--seconds 8] [--rounds 3] [--ratio 0.05]
                                      [--together]

``--together``: off, spans on and msg trace on (all three with the sampled traceparent) run at the same
time, each sidecar under its own wrk, so that a busy machine loads them alike; the other rows are left
out (their wrk would need another header). The lead's quiet-machine run is the sequential one.

``--baseline TREE``: every row also on another checkout (its own .venv runs the sidecar), right after
this tree's in the same round; printed: each row's CPU per message on this tree as % of the baseline's
(the median of the same-round ratios): a before/after of a change in one run.

    .venv/bin/python -m bench.tracing --rounds 3 --baseline /path/to/main-checkout [--rows unsampled,0.01]

Needs the otel extra in .venv (make install has it) and wrk.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import Row, bench_parser, environment, print_rows
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
    namesrv: str,
    topic: str,
    seconds: float,
    traceparent: str | None,
    env: dict[str, str],
    tree: Path | None = None,
    **settings: str,
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
            sidecar_process(namesrv, Path(data), tree=tree, **settings) as (url, proc),
        ):
            wrk(url, proc.pid, "/v1/messages", single, 8, 2, 1)  # warm up
            return wrk(url, proc.pid, "/v1/messages", single, 32, seconds, 1)
    finally:
        _restore(saved)


ANCHOR = "x32, traceparent, tracing off (anchor)"
OTEL_ON = "x32, traceparent, OTel spans on (OTLP batching)"
MSG_TRACE_ON = "x32, traceparent, RocketMQ msg trace on"
TOGETHER = (ANCHOR, OTEL_ON, MSG_TRACE_ON)  # same traceparent: one wrk environment serves all three


def measure_together(
    namesrv: str,
    topic: str,
    seconds: float,
    rows: dict[str, tuple[str | None, dict[str, str], dict[str, str]]],
) -> dict[str, Measured]:
    """The TOGETHER rows' sidecars running at once, each under its own wrk started at the same moment:
    they share the machine's load moment by moment (a busy machine swings sequential rows by 2-5x)."""
    single = json.dumps({"topic": topic, "body": BODY}).encode()
    saved = os.environ.get("TRACEPARENT")
    os.environ["TRACEPARENT"] = TRACEPARENT
    try:
        with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(TOGETHER)) as pool:
            running = []
            for name in TOGETHER:
                _, env, settings = rows[name]
                data = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                before = {k: os.environ.get(k) for k in env}
                os.environ.update(env)  # the process takes its environment when it starts
                try:
                    running.append(stack.enter_context(sidecar_process(namesrv, data, **settings)))
                finally:
                    _restore(before)

            def each(connections: int, secs: float) -> list[Measured]:
                jobs = [
                    pool.submit(wrk, url, proc.pid, "/v1/messages", single, connections, secs, 1)
                    for url, proc in running
                ]
                return [j.result() for j in jobs]

            each(8, 2)  # warm up
            return dict(zip(TOGETHER, each(32, seconds), strict=True))
    finally:
        _restore({"TRACEPARENT": saved})


def _restore(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def modes(sink: str, r: float) -> dict[str, tuple[str | None, dict[str, str], dict[str, str]]]:
    """Each row: the traceparent every request carries, the environment, the sidecar's settings."""
    otel = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": sink}

    on = {"OTEL": "true"}

    def ratio(arg: float) -> dict[str, str]:
        sampler = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": f"{arg}"}
        return {**otel, **sampler}

    return {
        ANCHOR: (TRACEPARENT, {}, {}),
        "x32, no traceparent, tracing off": (None, {}, {}),
        OTEL_ON: (TRACEPARENT, otel, {"OTEL": "true"}),
        "x32, unsampled traceparent, OTel spans on": (UNSAMPLED, otel, {"OTEL": "true"}),
        "x32, no traceparent, OTel on, parentbased_traceidratio 0.01": (None, ratio(0.01), on),
        f"x32, no traceparent, OTel on, parentbased_traceidratio {r}": (None, ratio(r), on),  # production
        MSG_TRACE_ON: (TRACEPARENT, {}, {"MSG_TRACE": "true"}),
    }


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--ratio",
        type=float,
        default=0.05,
        help="the sampling ratio of the production row (parentbased_traceidratio, no traceparent)",
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="tracing off, spans on and msg trace on run at once (same load), the other rows left out",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (with its .venv): every row measured there too, in the same round",
    )
    parser.add_argument(
        "--rows",
        help="only the rows whose names contain one of these comma-separated words (the anchor always)",
    )
    args = parser.parse_args()
    if not 0.0 < args.ratio <= 1.0:
        parser.error("--ratio must be in (0, 1]")
    if args.baseline is not None and (args.together or not (args.baseline / ".venv" / "bin").is_dir()):
        parser.error("--baseline needs a checkout with a .venv, and not --together")
    topic = f"traceBench{int(time.time())}"
    print(f"bench.tracing: topic {topic}; production row's ratio {args.ratio}; {environment()}", flush=True)
    got: dict[str, list[Measured]] = {}
    base: dict[str, list[Measured]] = {}
    with otlp_sink() as sink:
        rows = modes(sink, args.ratio)
        names = list(TOGETHER) if args.together else list(rows)
        if args.rows:
            words = [w.strip() for w in args.rows.split(",") if w.strip()]
            names = [n for n in names if n == ANCHOR or any(w in n for w in words)]
        measure(args.namesrv, topic, 2, None, {})  # creates the topic: no row pays for it
        for r in range(args.rounds):
            shift = r % len(names)
            base_round: dict[str, Measured] = {}
            if args.together:
                measured = measure_together(args.namesrv, topic, args.seconds, rows)
            else:
                measured = {}
                for name in names[shift:] + names[:shift]:
                    traceparent, env, settings = rows[name]
                    trees = [None] if args.baseline is None else [None, args.baseline][:: 1 - 2 * (r % 2)]
                    for tree in trees:  # with a baseline, which tree goes first alternates by round
                        m = measure(args.namesrv, topic, args.seconds, traceparent, env, tree, **settings)
                        (measured if tree is None else base_round)[name] = m
            for name, m in base_round.items():
                base.setdefault(name, []).append(m)
                print(f"round {r + 1}: baseline {name}: {m.rate:,.0f} msg/s, {m.cpu_per_100k:.1f} cpu-s/100k"
                      f"{'; ' + m.note if m.note else ''}", flush=True)  # fmt: skip
            for name, m in measured.items():
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
    if base:
        against = []
        for name in names:
            ratios = [m.cpu_per_100k / b.cpu_per_100k for m, b in zip(got[name], base[name], strict=True)]
            print(f"raw baseline {name}: cpu-s/100k {[round(b.cpu_per_100k, 1) for b in base[name]]}")
            against.append(Row(name, 100 * statistics.median(ratios), "%"))
        print_rows(
            f"this tree's CPU per message, % of {args.baseline}'s (median of the same-round ratios)", against
        )
    print(f"OTLP sink received {_Sink.spans_bytes} bytes; {environment()}")


if __name__ == "__main__":
    main()
