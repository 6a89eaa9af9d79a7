"""The sidecar against the Java client, in one run on one real broker (issue 18): RocketMQ's own benchmark
Producer (sync, 8 threads, 256-byte bodies) and BatchProducer (8 threads x 32) are the anchors; the
sidecar's HTTP paths are driven by wrk (C, keep-alive, Lua for the POST body) and its gRPC paths by
h2load (nghttp2's C load generator sending framed protobuf with content-type application/grpc: unary
Send, and the Publish stream with 100 messages per stream). Each rate is printed with its ratio to its
anchor, and CPU seconds per 100 000 messages (utime + stime from /proc/PID/stat) of the sidecar process
against the Java producer process. Each gRPC path is also run, right before the sidecar's, against
bench.grpc_floor (a no-op server of the same service answering at once; ``--grpc-floors`` picks which
kinds: grpc.aio, grpc's thread-pool server, grpclib, and ``relay``: grpc.aio plus one broker round
trip per unary call), and printed against it, in rate and in CPU. Each HTTP path is followed by the same
wrk command against bench.floor's relay (one prebuilt frame to the broker per request, nothing else): the
1-connection latencies and the x32 and batch CPU per message are printed against it too.

    make bench-tools                                     # apt-get install wrk nghttp2-client
    .venv/bin/python -m bench.compare [--namesrv 127.0.0.1:9876] [--quick]
    .venv/bin/python -m bench.compare --grpc-only --grpc-floors aio,sync    # the gRPC paths alone

A fresh topic per run. The broker's answers are counted from the sidecar's own /metrics, so a path that
spooled instead of sending, or failed, shows up rather than inflating the rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import (
    DEFAULT_CTL,
    Row,
    bench_parser,
    environment,
    free_port,
    java_benchmark,
    print_rows,
    printed,
    tools_or_exit,
)
from bench.floor import floor_relay, master_of
from bench.grpc_floor import KINDS as FLOOR_KINDS
from bench.grpc_floor import grpc_floor
from bench.sidecar_process import sidecar_process
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb

BODY = "x" * 256
TICKS = os.sysconf("SC_CLK_TCK")
JAVA_WINDOW_S = 10.0  # the Java benchmarks print one line per 10 s window
_TPS = re.compile(r"Send TPS: (\d+)")
_MPS = re.compile(r"Send MPS: (\d+)")
_WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local tp = os.getenv("TRACEPARENT")  -- bench.tracing: a W3C trace context on every request
if tp then wrk.headers["traceparent"] = tp end
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.body = f:read("*a")
f:close()
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests":%d,"seconds":%f,"non2xx":%d,"socket_errors":%d,"p50_ms":%f,"p99_ms":%f}\\n',
    summary.requests, summary.duration / 1e6, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its threads included), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS


def _java_pid(launcher: int) -> int:
    """real-broker.sh runs java as its child: that child's pid (the launcher's own while it starts)."""
    with contextlib.suppress(OSError):
        children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
        if children:
            return int(children[0])
    return launcher


def stop_group(proc: subprocess.Popen[str]) -> None:
    """End the launcher and the java it started: SIGTERM to the group, SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while _group_alive(proc) and time.monotonic() < deadline:
        time.sleep(0.1)  # other processes' exit: nothing here to await
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _group_alive(proc: subprocess.Popen[str]) -> bool:
    proc.poll()  # reap the launcher: a zombie would count as alive
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Measured:
    rate: float  # messages per second
    cpu_per_100k: float  # CPU seconds of the process under test per 100 000 messages
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    note: str = ""


def java_anchor(cmd: list[str], pattern: re.Pattern[str], windows: int) -> Measured:
    """Run a Java benchmark (``cmd`` from java_benchmark) until it has printed ``windows`` lines after the
    first (warm-up) one; the rate is the mean of those windows, the CPU that of the java process between
    the lines."""
    # Its own process group: real-broker.sh runs java as a child, which must end with it.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    rates: list[float] = []
    start: tuple[float, float] | None = None
    end = (0.0, 0.0)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = pattern.search(line)
            if not match:
                continue
            pid = _java_pid(proc.pid)
            now = (time.monotonic(), cpu_seconds(pid))
            if start is None:
                start = now  # the first window holds the JVM's start and warm-up
                continue
            rates.append(float(match.group(1)))
            end = now
            if len(rates) >= windows:
                break
    finally:
        stop_group(proc)
    if start is None or not rates:
        raise RuntimeError(f"{cmd[3]} printed no rate; is the broker up? ({' '.join(cmd)})")
    rate = sum(rates) / len(rates)
    messages = rate * (end[0] - start[0])
    return Measured(rate, (end[1] - start[1]) * 100_000 / messages)


def _outcomes(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.findall(r'rocksidecar_messages_total\{outcome="(\w+)"\} (\S+)', text)
    return {k: float(v) for k, v in found}


@contextlib.contextmanager
def _measuring(url: str, pid: int) -> Iterator[dict[str, float]]:
    """CPU and counted messages of the sidecar over the block."""
    box: dict[str, float] = {}
    before_out, before_cpu, t0 = _outcomes(url), cpu_seconds(pid), time.monotonic()
    yield box
    box["cpu"] = cpu_seconds(pid) - before_cpu
    box["seconds"] = time.monotonic() - t0
    after = _outcomes(url)
    for k in set(after) | set(before_out):
        box[k] = after.get(k, 0.0) - before_out.get(k, 0.0)


def _check_outcomes(box: dict[str, float], expected: float, in_flight: int) -> str:
    """Say when the sidecar did not send everything it answered (spooled, failed, rejected). Up to
    ``in_flight`` messages may be answered after the load generator stopped counting."""
    others = {k: int(v) for k, v in box.items() if k not in ("cpu", "seconds", "sent") and v}
    if others or not 0 <= box.get("sent", 0.0) - expected <= in_flight:
        return f"sent {int(box.get('sent', 0))} of {int(expected)}; others {others}"
    return ""


def run_wrk(url: str, body: bytes, connections: int, seconds: float) -> dict[str, float]:
    """wrk POSTing ``body`` to ``url`` over keep-alive connections: its RESULT line (requests, seconds,
    non2xx, socket_errors, p50_ms, p99_ms)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "body.json").write_bytes(body)
        (Path(tmp) / "post.lua").write_text(_WRK_LUA)
        threads = min(2, connections)
        cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{round(seconds)}s"]
        cmd += ["-s", str(Path(tmp) / "post.lua"), url]
        env = {**os.environ, "BODY_FILE": str(Path(tmp) / "body.json")}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    result: dict[str, float] = json.loads(printed("wrk", r"^RESULT (.*)$", out, re.M)[1])
    return result


def wrk(url: str, pid: int, path: str, body: bytes, connections: int, seconds: float, per: int) -> Measured:
    with _measuring(url, pid) as box:
        r = run_wrk(f"{url}{path}", body, connections, seconds)
    ok = r["requests"] - r["non2xx"]
    messages = ok * per
    note = _check_outcomes(box, messages, connections * per)
    if r["non2xx"] or r["socket_errors"]:
        note += f" non-2xx {r['non2xx']}, socket errors {r['socket_errors']}"
    return Measured(
        messages / r["seconds"], box["cpu"] * 100_000 / max(messages, 1), r["p50_ms"], r["p99_ms"], note
    )


def floor(
    namesrv: str, topic: str, body: bytes, seconds: float, connections: int = 1, batch: int = 0
) -> Measured:
    """wrk at ``connections`` against bench.floor's relay to the broker serving ``topic`` (``batch`` > 0:
    one SEND_BATCH_MESSAGE of that many per request): the chain's own latency on this machine, and the
    relay's CPU per message, what any Python process on uvloop spends carrying a message from HTTP to the
    broker and back."""
    addr, name = asyncio.run(master_of(namesrv, topic))
    port = free_port()
    path = "/v1/messages:batch" if batch else "/v1/messages"
    with floor_relay(addr, name, topic, port, batch) as proc:
        before = cpu_seconds(proc.pid)
        r = run_wrk(f"http://127.0.0.1:{port}{path}", body, connections, seconds)
        cpu = cpu_seconds(proc.pid) - before
    note = f"non-2xx {r['non2xx']}" if r["non2xx"] or r["socket_errors"] else ""
    messages = (r["requests"] - r["non2xx"]) * max(batch, 1)
    return Measured(messages / r["seconds"], cpu * 100_000 / max(messages, 1), r["p50_ms"], r["p99_ms"], note)


def _frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def h2load(addr: str, method: str, body: bytes, clients: int, streams: int, seconds: float) -> float:
    """Calls h2load completed against one method of the Sidecar service at ``addr`` (HTTP 200: a gRPC
    error still counts, so the sidecar's own counts are what its rates use)."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(body)
        f.flush()
        cmd = ["h2load", "-c", str(clients), "-m", str(streams), "-D", str(int(seconds)), "-d", f.name]
        cmd += ["-H", "content-type: application/grpc", "-H", "te: trailers"]
        cmd += [f"http://{addr}/rocksidecar.v1.Sidecar/{method}"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(printed("h2load", r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)[2])


@dataclass(frozen=True)
class GrpcLoad:
    """One gRPC path as h2load drives it: the method, one call's framed body, the messages in it."""

    label: str
    method: str
    body: bytes
    per_call: int
    clients: int = 8
    streams: int = 1


def grpc_loads(topic: str) -> list[GrpcLoad]:
    message = pb.Message(topic=topic, body=BODY)
    unary = _frame(pb.SendRequest(message=message).SerializeToString())
    stream = b"".join(
        _frame(pb.PublishRequest(sequence=i, message=message).SerializeToString()) for i in range(100)
    )
    return [GrpcLoad("unary", "Send", unary, 1, streams=4), GrpcLoad("stream", "Publish", stream, 100)]


def grpc_sidecar(grpc_addr: str, pid: int, url: str, load: GrpcLoad, seconds: float) -> Measured:
    with _measuring(url, pid) as box:
        h2load(grpc_addr, load.method, load.body, load.clients, load.streams, seconds)
    # Counted by the sidecar: a gRPC error still answers HTTP 200, so h2load's count would lie.
    sent = box.get("sent", 0.0)
    note = _check_outcomes(box, sum(v for k, v in box.items() if k not in ("cpu", "seconds")), 0)
    return Measured(sent / box["seconds"], box["cpu"] * 100_000 / max(sent, 1), note=note)


def grpc_floor_path(kind: str, load: GrpcLoad, seconds: float, relay: Sequence[str] = ()) -> Measured:
    """The same h2load command against bench.grpc_floor's server of ``kind`` (a server of its own for
    each measurement, started before the clock and CPU are read). ``relay``: (broker address, broker
    name, topic) for the ``relay`` kind."""
    port = free_port()
    with grpc_floor(port, kind, relay=relay if kind == "relay" else ()) as proc:
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        calls = h2load(f"127.0.0.1:{port}", load.method, load.body, load.clients, load.streams, seconds)
        cpu, took = cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
    messages = calls * load.per_call
    return Measured(messages / took, cpu * 100_000 / max(messages, 1))


def grpc_paths(
    grpc_addr: str,
    pid: int,
    url: str,
    topic: str,
    seconds: float,
    floors: Sequence[str] = ("aio",),
    relay: Sequence[str] = (),
    profile: Path | None = None,
) -> dict[str, Measured]:
    """Each gRPC path of the sidecar with each floor's server right before it (the same minutes):
    ``unary``, ``stream``, ``unary floor aio``, ... The ``relay`` floor relays unary calls only.
    ``profile``: py-spy the sidecar under each path into that folder (``grpc-unary``, ``grpc-stream``)."""
    out: dict[str, Measured] = {}
    for load in grpc_loads(topic):
        for kind in floors_of(load.label, floors):
            out[f"{load.label} floor {kind}"] = grpc_floor_path(kind, load, seconds, relay)
        with profiled(pid, profile, f"grpc-{load.label}", seconds):
            out[load.label] = grpc_sidecar(grpc_addr, pid, url, load, seconds)
    return out


def floors_of(load: str, floors: Sequence[str]) -> list[str]:
    """The floors measured for ``load``: the relay's Publish is a no-op, so not a floor of streams."""
    return [k for k in floors if k != "relay" or load == "unary"]


@contextlib.contextmanager
def profiled(pid: int, out: Path | None, name: str, seconds: float) -> Iterator[None]:
    """py-spy (sampling, non-blocking) on the sidecar over the block: ``out/name.raw`` (collapsed stacks,
    for flame graphs) and its summary printed. Nothing when ``out`` is None. With BENCH_PROFILE_NATIVE=1
    py-spy samples native frames too (grpc's Cython, uvloop), pausing the process for each sample."""
    if out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"{name}.raw"
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"  # the dev extra's
    how = ["--native"] if os.environ.get("BENCH_PROFILE_NATIVE") == "1" else ["--nonblocking"]
    cmd = [spy, "record", *how, "-r", "200", "-f", "raw", "-p", str(pid), "-o", str(raw)]
    proc = subprocess.Popen(
        [*cmd, "-d", str(round(seconds))], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        yield
    finally:
        _, err = proc.communicate(timeout=60)
    if not raw.exists():
        print(f"\nprofile {name}: py-spy recorded nothing: {err.decode()[-500:]}")
        return
    print(f"\nprofile {name} ({raw}):\n{summarise(raw)}")


def summarise(raw: Path, top: int = 14) -> str:
    """Share of samples by function: where time is spent (self) and what it is spent under (inclusive)."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for f in set(frames):
            under[f] = under.get(f, 0) + n
    lines = ["  self:"]
    lines += [
        f"  {100 * n / total:5.1f}% {f[:110]}" for f, n in sorted(own.items(), key=lambda x: -x[1])[:top]
    ]
    lines += ["  inclusive:"]
    ranked = sorted(under.items(), key=lambda x: -x[1])
    lines += [f"  {100 * n / total:5.1f}% {f[:110]}" for f, n in ranked[: top + 10]]
    return "\n".join(lines)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="the real RocketMQ name server")
    parser.add_argument(
        "--ctl",
        type=Path,
        default=Path(os.environ.get("ROCKSIDECAR_TEST_BROKER_CTL", DEFAULT_CTL)),
        help="real-broker.sh, which runs the Java classes (default: $ROCKSIDECAR_TEST_BROKER_CTL)",
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="per sidecar path")
    parser.add_argument("--windows", type=int, default=3, help="10-s windows per Java anchor after warm-up")
    parser.add_argument("--quick", action="store_true", help="5 s per path, 1 Java window (about 2 minutes)")
    parser.add_argument("--no-grpc", action="store_true")
    parser.add_argument(
        "--grpc-only", action="store_true", help="only the gRPC paths, their floors and the Java sync anchor"
    )
    parser.add_argument(
        "--grpc-floors",
        default="aio",
        help="comma-separated bench.grpc_floor kinds beside the gRPC paths (aio, sync, grpclib, relay)",
    )
    parser.add_argument(
        "--sidecar-only", action="store_true", help="skip the Java anchors (while profiling: no ratios)"
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy the sidecar under x32, batch and gRPC load into DIR"
    )
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.windows = 5.0, 1
    floors = [k for k in args.grpc_floors.split(",") if k]
    if unknown := set(floors) - set(FLOOR_KINDS):
        parser.error(f"--grpc-floors: unknown {sorted(unknown)}; known: {', '.join(FLOOR_KINDS)}")
    tools_or_exit("bench.compare", {"wrk": "wrk", "h2load": "nghttp2-client"})
    if not args.sidecar_only and not args.ctl.is_file():
        sys.exit(f"bench.compare: no {args.ctl}: pass --ctl or set ROCKSIDECAR_TEST_BROKER_CTL")
    topic = f"RsCmp{int(time.time())}"
    print(f"bench.compare: topic {topic}; {environment()}", flush=True)
    sizes = ["-w", "8", "-s", "256"]
    java = java_batch = Measured(float("nan"), float("nan"))
    if not args.sidecar_only:
        single_cmd = java_benchmark(args.ctl, "Producer", args.namesrv, topic, *sizes)
        java = java_anchor(single_cmd, _TPS, args.windows)
        if not args.grpc_only:
            batch_cmd = java_benchmark(args.ctl, "BatchProducer", args.namesrv, topic, *sizes, "-b", "32")
            java_batch = java_anchor(batch_cmd, _MPS, args.windows)
    single = json.dumps({"topic": topic, "body": BODY}).encode()
    batch = json.dumps({"messages": [{"topic": topic, "body": BODY}] * 100}).encode()
    grpc_addr = f"127.0.0.1:{free_port()}"
    http: dict[str, Measured] = {}
    grpc: dict[str, Measured] = {}
    with (
        tempfile.TemporaryDirectory() as data,
        sidecar_process(args.namesrv, Path(data), GRPC_ADDR=grpc_addr) as (url, proc),
    ):
        wrk(url, proc.pid, "/v1/messages", single, 8, 2, 1)  # warm up: routes, connections, queues
        if not args.grpc_only:
            with profiled(proc.pid, args.profile, "single-x32", args.seconds):
                http["http32"] = wrk(url, proc.pid, "/v1/messages", single, 32, args.seconds, 1)
            http["http1"] = wrk(url, proc.pid, "/v1/messages", single, 1, args.seconds, 1)
            http["floor"] = floor(args.namesrv, topic, single, args.seconds)
            http["floor32"] = floor(args.namesrv, topic, single, args.seconds, connections=32)
            with profiled(proc.pid, args.profile, "batch-x8", args.seconds):
                http["batch"] = wrk(url, proc.pid, "/v1/messages:batch", batch, 8, args.seconds, 100)
            http["batch floor"] = floor(args.namesrv, topic, batch, args.seconds, connections=8, batch=100)
        # the relay floor sends to the broker the warm-up's sends went to
        relay = (*asyncio.run(master_of(args.namesrv, topic)), topic) if "relay" in floors else ()
        if not args.no_grpc:
            grpc = grpc_paths(grpc_addr, proc.pid, url, topic, args.seconds, floors, relay, args.profile)
    rates = [Row("Java Producer, sync, 8 threads (anchor)", java.rate, "msg/s", java.rate)]
    cpu = [Row("Java Producer process (anchor)", java.cpu_per_100k, "cpu-s", java.cpu_per_100k)]
    if http:
        http_rates, http_cpu = _http_rows(http, java, java_batch)
        rates += http_rates
        cpu += http_cpu
    grpc_rates, grpc_cpu = _grpc_rows(grpc, java, floors)
    print_rows("Rates (ratio to the anchor)", [*rates, *grpc_rates])
    print_rows("CPU seconds per 100 000 messages (ratio to the Java process; lower is better)", cpu)
    if grpc_cpu:
        print_rows("gRPC CPU seconds per 100 000 messages (ratio to the same path's floor)", grpc_cpu)
    for name, m in {**http, **grpc}.items():
        if m.note:
            print(f"  NOTE {name}: {m.note}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def _http_rows(
    http: dict[str, Measured], java: Measured, java_batch: Measured
) -> tuple[list[Row], list[Row]]:
    http32, http1, chain, http_batch = http["http32"], http["http1"], http["floor"], http["batch"]
    floor32, batch_floor = http["floor32"], http["batch floor"]
    rates = [
        Row("POST /v1/messages, 32 connections (wrk)", http32.rate, "msg/s", java.rate),
        Row(f"  p50 (p99 {http32.p99_ms:.2f} ms)", http32.p50_ms, "ms"),
        Row("32 connections' floor: wrk -> bench.floor relay -> broker", floor32.rate, "msg/s", java.rate),
        Row("POST /v1/messages, 1 connection (wrk)", http1.rate, "msg/s", java.rate),
        Row(f"  p50 (p99 {http1.p99_ms:.2f} ms; targets 0.35 / 1 ms)", http1.p50_ms, "ms", chain.p50_ms),
        Row("  p99 (ratio to the floor's p99)", http1.p99_ms, "ms", chain.p99_ms),
        Row(
            "1 connection's floor: wrk -> bench.floor relay -> broker (anchor)",
            chain.rate,
            "msg/s",
            chain.rate,
        ),
        Row(f"  p50 (p99 {chain.p99_ms:.2f} ms)", chain.p50_ms, "ms", chain.p50_ms),
        Row("Java BatchProducer, 8 threads x 32 (anchor)", java_batch.rate, "msg/s", java_batch.rate),
        Row("POST /v1/messages:batch of 100, 8 connections", http_batch.rate, "msg/s", java_batch.rate),
        Row(f"  p50 (p99 {http_batch.p99_ms:.2f} ms)", http_batch.p50_ms, "ms"),
        Row(
            "batch's floor: relay of one SEND_BATCH of 100, 8 connections",
            batch_floor.rate,
            "msg/s",
            java_batch.rate,
        ),
    ]
    # (row, what was measured, what it is compared with): CPU seconds per 100 000 messages of both
    cpu_pairs = (
        ("sidecar, POST /v1/messages x32", http32, java),
        ("floor relay x32 (nothing but the hops)", floor32, java),
        ("  the sidecar x32 against the floor relay", http32, floor32),
        ("sidecar, POST /v1/messages x1", http1, java),
        ("floor relay x1", chain, java),
        ("Java BatchProducer process (anchor)", java_batch, java_batch),
        ("sidecar, batch of 100 x8", http_batch, java_batch),
        ("floor relay, batch of 100 x8", batch_floor, java_batch),
        ("  the sidecar's batch against the floor relay", http_batch, batch_floor),
    )
    cpu = [Row(name, m.cpu_per_100k, "cpu-s", anchor.cpu_per_100k) for name, m, anchor in cpu_pairs]
    return rates, cpu


def _grpc_rows(
    grpc: dict[str, Measured], java: Measured, floors: Sequence[str]
) -> tuple[list[Row], list[Row]]:
    """Rates against Java sync and each path's floors; CPU per message against the first floor's."""
    rates: list[Row] = []
    cpu: list[Row] = []
    for load in ("unary", "stream"):
        if load not in grpc:
            continue
        m = grpc[load]
        rates.append(
            Row(f"gRPC {load} (h2load, 8 connections; ratio to Java sync)", m.rate, "msg/s", java.rate)
        )
        kinds = floors_of(load, floors)
        for kind in kinds:
            f = grpc[f"{load} floor {kind}"]
            rates.append(
                Row(
                    f"  floor: {kind} server, same h2load (ratio to Java sync)",
                    f.rate,
                    "msg/s",
                    java.rate,
                )
            )
            rates.append(Row(f"  the sidecar's ratio to the {kind} floor", m.rate, "msg/s", f.rate))
        first = grpc[f"{load} floor {kinds[0]}"] if kinds else None
        anchor = first.cpu_per_100k if first else None
        cpu.append(Row(f"sidecar, gRPC {load}", m.cpu_per_100k, "cpu-s", anchor))
        cpu += [
            Row(f"  floor {kind}", grpc[f"{load} floor {kind}"].cpu_per_100k, "cpu-s", anchor)
            for kind in kinds
        ]
    return rates, cpu


if __name__ == "__main__":
    main()
