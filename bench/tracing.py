"""What tracing costs (issue 31), in one run on the real broker: the sidecar's x32 single-message HTTP
rate and its CPU seconds per 100 000 messages, with every request carrying a sampled W3C traceparent:
(1) tracing off (the anchor), (2) OpenTelemetry spans on, batched and exported by the sidecar's loop
over OTLP/HTTP to a local sink that accepts everything (and the same over OTLP/gRPC, the default protocol,
to the same sink process), (3) RocketMQ message trace on (Pub records to
RMQ_SYS_TRACE_TOPIC). Also: off without the header (carrying a trace context costs nothing), and spans
on for requests the sampler leaves out (an unsampled traceparent; no traceparent under
``parentbased_traceidratio`` at 1 %), which must cost ~nothing, and the documented production setting:
no traceparent under ``parentbased_traceidratio`` at ``--ratio`` (default 0.05: that share of the
requests sampled, the rest on the sample-free path). Each row is a fresh sidecar.

Interleaved: in each round every row is measured right next to its own run of (1) (off, row, off,
row, ...; which of the pair goes first alternates by round, the rows rotate their order), and each row's
figure is the median over the rounds of its ratio to the (1) of its own pair. Two ratios per row: CPU
per message (user+sys from /proc of the sidecar, plus the OTLP collector's process where the row exports:
what the spans cost wherever they are handled; the load generator is left out), the figure the targets
are judged on, since on a saturated sidecar the x32 rate is 1 / CPU per message and CPU is far steadier
than the rate on a shared machine; and the x32 rate ratio (the issue's words, printed beside it). The
anchors' own spread is printed as the run's resolution.

    .venv/bin/python -m bench.tracing [--namesrv 127.0.0.1:9876] [--seconds 8] [--rounds 3] [--ratio 0.05]
                                      [--together]

``--together``: off, spans on and msg trace on (all three with the sampled traceparent) run at the same
time, each sidecar under its own wrk, so that a busy machine loads them alike; the other rows are left
out (their wrk would need another header). The lead's quiet-machine run is the sequential one.

``--baseline TREE``: every row also on another checkout (its own .venv runs the sidecar), next to
this tree's in the same round; printed: each row's CPU per message on this tree as % of the baseline's
(the median of the same-round ratios): a before/after of a change in one run, or, with the build without
tracing as TREE, what tracing off costs (the anchor row).

    .venv/bin/python -m bench.tracing --rounds 3 --baseline /path/to/main-checkout [--rows unsampled,0.01]

Needs the otel extra in .venv (make install has it) and wrk.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NamedTuple

from bench.common import Row, bench_parser, environment, print_rows, rotated
from bench.compare import BODY, Measured, cpu_seconds, wrk
from bench.sidecar_process import sidecar_process

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = TRACEPARENT[:-2] + "00"


SINK_MAX_BODY = 64 << 20  # an export larger than this is refused: the sink's memory stays bounded


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every export (so the exporter's cost is the sidecar's own)."""

    received: Any = None  # the bytes taken, a multiprocessing Value shared with the bench
    protocol_version = "HTTP/1.1"  # keeps the exporter's connection open, as a collector does

    def do_POST(self) -> None:
        n = int(self.headers.get("content-length") or 0)
        if not 0 <= n <= SINK_MAX_BODY:
            self.send_error(413)
            return
        got = len(self.rfile.read(n))
        with _Sink.received.get_lock():
            _Sink.received.value += got
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _collector(received: Any, port_out: Connection) -> None:
    """The collector's process: its own /proc CPU is what handling the exports costs at the far end.
    OTLP/HTTP and OTLP/gRPC (the TraceService's Export, taking the request's bytes as they come)."""
    import grpc  # the bench's own process need not load it

    _Sink.received = received
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)

    def export(request: bytes, context: grpc.ServicerContext) -> bytes:
        with received.get_lock():
            received.value += len(request)
        return b""  # an empty ExportTraceServiceResponse

    rpc = grpc.server(ThreadPoolExecutor(2))
    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(export)},
    )
    rpc.add_generic_rpc_handlers((handler,))
    grpc_port = rpc.add_insecure_port("127.0.0.1:0")
    rpc.start()
    port_out.send((server.server_address[1], grpc_port))
    port_out.close()
    server.serve_forever()


class Collector(NamedTuple):
    url: str
    pid: int
    received: Any  # multiprocessing Value: bytes of exports taken
    grpc_url: str = ""  # its OTLP/gRPC endpoint

    def cpu(self) -> float:
        return cpu_seconds(self.pid)


@contextlib.contextmanager
def otlp_sink() -> Iterator[Collector]:
    ctx = multiprocessing.get_context("spawn")
    received = ctx.Value("q", 0)
    port_in, port_out = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_collector, args=(received, port_out), daemon=True)
    proc.start()
    try:
        if not port_in.poll(60):
            raise RuntimeError("the OTLP collector process did not start")
        assert proc.pid is not None
        http_port, grpc_port = port_in.recv()
        yield Collector(f"http://127.0.0.1:{http_port}", proc.pid, received, f"http://127.0.0.1:{grpc_port}")
    finally:
        proc.terminate()
        proc.join(10)


@dataclass(frozen=True)
class Sample:
    """One row's run: x32 rate, and CPU seconds per 100 000 messages of the sidecar and of the collector
    over the same window."""

    rate: float
    sidecar: float
    collector: float
    note: str = ""

    @property
    def cpu(self) -> float:
        """What the targets are judged on: the sidecar's CPU per message plus its exports' handling."""
        return self.sidecar + self.collector

    def line(self) -> str:
        extra = f" (sidecar {self.sidecar:.1f} + collector {self.collector:.2f})" if self.collector else ""
        return (
            f"{self.rate:,.0f} msg/s, {self.cpu:.1f} cpu-s/100k{extra}{'; ' + self.note if self.note else ''}"
        )


def _sample(m: Measured, sidecar_cpu: float, collector_cpu: float) -> Sample:
    """``m``'s CPU is the sidecar's over wrk's window; the collector's share is scaled by the two processes'
    CPU read around that same window."""
    collector = m.cpu_per_100k * collector_cpu / sidecar_cpu if sidecar_cpu > 0 else 0.0
    return Sample(m.rate, m.cpu_per_100k, collector, m.note)


def measure(
    namesrv: str,
    topic: str,
    seconds: float,
    traceparent: str | None,
    env: dict[str, str],
    tree: Path | None = None,
    collector: Collector | None = None,
    **settings: str,
) -> Sample:
    single = json.dumps({"topic": topic, "body": BODY}).encode()
    saved = {k: os.environ.get(k) for k in ("TRACEPARENT", *env)}
    os.environ.update(env)
    if traceparent is not None:
        os.environ["TRACEPARENT"] = traceparent  # bench.compare's wrk script sends it as a header
    else:
        os.environ.pop("TRACEPARENT", None)
    exports = collector is not None and "OTEL_EXPORTER_OTLP_ENDPOINT" in env
    try:
        with (
            tempfile.TemporaryDirectory() as data,
            sidecar_process(namesrv, Path(data), tree=tree, **settings) as (url, proc),
        ):
            wrk(url, proc.pid, "/v1/messages", single, 8, 2, 1)  # warm up
            c0 = collector.cpu() if exports and collector else 0.0
            s0 = cpu_seconds(proc.pid)
            m = wrk(url, proc.pid, "/v1/messages", single, 32, seconds, 1)
            s1 = cpu_seconds(proc.pid)
            c1 = collector.cpu() if exports and collector else 0.0
            return _sample(m, s1 - s0, c1 - c0)
    finally:
        _restore(saved)


ANCHOR = "x32, traceparent, tracing off (anchor)"
OTEL_ON = "x32, traceparent, OTel spans on (OTLP batching)"
OTEL_GRPC = "x32, traceparent, OTel spans on (OTLP/gRPC batching, the default protocol)"
MSG_TRACE_ON = "x32, traceparent, RocketMQ msg trace on"
TOGETHER = (ANCHOR, OTEL_ON, MSG_TRACE_ON)  # same traceparent: one wrk environment serves all three


def measure_together(
    namesrv: str,
    topic: str,
    seconds: float,
    rows: dict[str, tuple[str | None, dict[str, str], dict[str, str]]],
    collector: Collector,
) -> dict[str, Sample]:
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
            otel_pid = running[TOGETHER.index(OTEL_ON)].proc.pid
            c0, s0 = collector.cpu(), cpu_seconds(otel_pid)
            measured = each(32, seconds)
            c1, s1 = collector.cpu(), cpu_seconds(otel_pid)
            return {
                name: _sample(m, s1 - s0, c1 - c0) if name == OTEL_ON else _sample(m, 1.0, 0.0)
                for name, m in zip(TOGETHER, measured, strict=True)
            }
    finally:
        _restore({"TRACEPARENT": saved})


def _restore(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def modes(
    sink: str, r: float, grpc_sink: str = ""
) -> dict[str, tuple[str | None, dict[str, str], dict[str, str]]]:
    """Each row: the traceparent every request carries, the environment, the sidecar's settings."""
    otel = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": sink}
    over_grpc = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": grpc_sink}

    on = {"OTEL": "true"}

    def ratio(arg: float) -> dict[str, str]:
        sampler = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": f"{arg}"}
        return {**otel, **sampler}

    return {
        ANCHOR: (TRACEPARENT, {}, {}),
        "x32, no traceparent, tracing off": (None, {}, {}),
        OTEL_ON: (TRACEPARENT, otel, {"OTEL": "true"}),
        OTEL_GRPC: (TRACEPARENT, over_grpc, {"OTEL": "true"}),
        "x32, unsampled traceparent, OTel spans on": (UNSAMPLED, otel, {"OTEL": "true"}),
        "x32, no traceparent, OTel on, parentbased_traceidratio 0.01": (None, ratio(0.01), on),
        f"x32, no traceparent, OTel on, parentbased_traceidratio {r}": (None, ratio(r), on),  # production
        MSG_TRACE_ON: (TRACEPARENT, {}, {"MSG_TRACE": "true"}),
    }


def main() -> None:
    parser = bench_parser(__doc__, namesrv="127.0.0.1:9876", seconds=8.0, rounds=3)
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
    with otlp_sink() as collector:
        rows = modes(collector.url, args.ratio, collector.grpc_url)
        names = list(TOGETHER) if args.together else list(rows)
        if args.rows:
            words = [w.strip() for w in args.rows.split(",") if w.strip()]
            names = [n for n in names if n == ANCHOR or any(w in n for w in words)]
        measure(args.namesrv, topic, 2, None, {})  # creates the topic: no row pays for it
        run = Run(names)
        for r in range(args.rounds):
            if args.together:
                got = measure_together(args.namesrv, topic, args.seconds, rows, collector)
                for name in names[1:]:
                    run.pair(r, name, got[ANCHOR], got[name])
                continue
            others = names[1:] or names[:1]  # the anchor alone: paired with itself (its spread)
            for name in rotated(others, r):
                trees: list[Path | None] = [None] if args.baseline is None else [None, args.baseline]
                done: dict[tuple[str, Path | None], Sample] = {}
                for tree in rotated(trees, r):  # who goes first alternates: the tree and the row
                    for row in rotated([ANCHOR, name], r):
                        traceparent, env, settings = rows[row]
                        done[row, tree] = measure(
                            args.namesrv, topic, args.seconds, traceparent, env, tree, collector, **settings
                        )
                        where = "" if tree is None else "baseline "
                        print(f"round {r + 1}: {where}{row}: {done[row, tree].line()}", flush=True)
                run.pair(r, name, done[ANCHOR, None], done[name, None])
                if args.baseline is not None:
                    run.against(name, done[name, args.baseline], done[name, None])
                    run.against(ANCHOR, done[ANCHOR, args.baseline], done[ANCHOR, None])
        received = collector.received.value
    run.report(args.baseline)
    print(f"OTLP collector received {received} bytes; {environment()}")


class Run:
    """Each row's pairs (its own anchor run, the row's run) by round; with a baseline, (baseline, this)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.pairs: dict[str, list[tuple[Sample, Sample]]] = {n: [] for n in names}
        self.base: dict[str, list[tuple[Sample, Sample]]] = {n: [] for n in names}

    def pair(self, r: int, name: str, anchor: Sample, row: Sample) -> None:
        self.pairs[name].append((anchor, row))
        if name != ANCHOR:
            self.pairs[ANCHOR].append((anchor, anchor))

    def against(self, name: str, base: Sample, this: Sample) -> None:
        self.base[name].append((base, this))

    def report(self, baseline: Path | None) -> None:
        cpu_rows, rate_rows = [], []
        for name in self.names:
            pairs = self.pairs[name]
            if not pairs:
                continue
            cpus = [m.cpu / a.cpu for a, m in pairs]
            rates = [m.rate / a.rate for a, m in pairs]
            collector = [round(m.collector, 2) for _, m in pairs]
            line = f"raw {name}: rates {[round(m.rate) for _, m in pairs]}, "
            line += f"cpu-s/100k {[round(m.cpu, 2) for _, m in pairs]}"
            line += f", of it collector {collector}" if any(collector) else ""
            line += "" if name == ANCHOR else f"; per pair: CPU {_fmt(cpus)}, rate {_fmt(rates)}"
            print(line)
            if name != ANCHOR:
                cpu_rows.append(Row(name, 100 * statistics.median(cpus), "%"))
                rate_rows.append(Row(name, 100 * statistics.median(rates), "%"))
        anchors = [a.cpu for a, _ in self.pairs[ANCHOR]]
        if anchors:
            spread = max(anchors) / min(anchors)
            print(f"resolution: the anchor's own runs span {min(anchors):.1f}-{max(anchors):.1f} cpu-s/100k "
                  f"({spread:.2f}x) and {min(a.rate for a, _ in self.pairs[ANCHOR]):,.0f}-"
                  f"{max(a.rate for a, _ in self.pairs[ANCHOR]):,.0f} msg/s")  # fmt: skip
        print_rows("CPU per message (sidecar + collector), % of its paired anchor's: median over rounds "
                   "(the targets' figure)", cpu_rows)  # fmt: skip
        print_rows("x32 rate, % of its paired anchor's: median over rounds", rate_rows)
        if baseline is not None:
            against = []
            for name in self.names:
                got = self.base[name]
                if got:
                    ratios = [t.cpu / b.cpu for b, t in got]
                    print(f"raw baseline {name}: cpu-s/100k {[round(b.cpu, 2) for b, _ in got]}; "
                          f"this / baseline per pair {_fmt(ratios)}")  # fmt: skip
                    against.append(Row(name, 100 * statistics.median(ratios), "%"))
            print_rows(
                f"this tree's CPU per message, % of {baseline}'s (median of the same-round ratios)", against
            )


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    main()
