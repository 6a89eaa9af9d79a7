"""HTTP API load (issue 5): single POSTs/s and batch messages/s with p50/p99 latency, from a separate load
process against the sidecar (its own process) over devbroker (its own process) or, with --namesrv, a real
RocketMQ. The direct client's concurrent send rate is measured in the same run as the anchor.
Targets: >= 3 000 single requests/s and >= 50 000 messages/s in batches of 100.

    .venv/bin/python -m bench.http_load [--namesrv 127.0.0.1:9876] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import uvloop

from bench.common import Row, bench_parser, child_output, environment, print_rows, targets
from bench.send_throughput import SendLoad, measure
from bench.sidecar_process import sidecar_process


def load(port: int, path: str, body: bytes, connections: int, seconds: float) -> dict[str, object]:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(body)
        f.flush()
        out = child_output(
            "-m", "bench.loadgen", "127.0.0.1", str(port), path, f.name, str(connections), str(seconds)
        )
    return dict(json.loads(out))


def _latency(label: str, r: dict[str, object]) -> Row:
    """A row whose figure is p50 (ms); p99 and the status counts ride in its name."""
    name = f"{label}:   latency p50, p99 {r['p99_ms']:.2f} ms; statuses {r['statuses']}"
    return Row(name, float(r["p50_ms"]), "ms")  # type: ignore[arg-type]


def run(label: str, namesrv: str, args: argparse.Namespace) -> list[Row]:
    topic = f"RsHttp{int(time.time())}"
    direct = uvloop.run(measure(namesrv, topic, SendLoad(singles=20_000, batches=200)))
    body = "x" * 256
    single = json.dumps({"topic": topic, "body": body}).encode()
    batch = json.dumps({"messages": [{"topic": topic, "body": body} for _ in range(100)]}).encode()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as data, sidecar_process(namesrv, Path(data)) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        load(port, "/v1/messages", single, 8, 2)  # warm up: routes, connections, auto-creation
        s = load(port, "/v1/messages", single, args.connections, args.seconds)
        b = load(port, "/v1/messages:batch", batch, args.batch_connections, args.seconds)
    anchor_single = direct["single, 64 in flight"]
    anchor_batch = direct["batch of 100, 8 in flight"]
    rps = s["requests"] / s["seconds"]  # type: ignore[operator]
    mps = b["requests"] * 100 / b["seconds"]  # type: ignore[operator]
    rows += [
        Row(f"{label}: direct client, single, 64 in flight (anchor)", anchor_single, "msg/s", anchor_single),
        Row(f"{label}: HTTP POST /v1/messages, {args.connections} connections", rps, "req/s", anchor_single),
        _latency(label, s),
        Row(f"{label}: direct client, batches of 100 (anchor)", anchor_batch, "msg/s", anchor_batch),
        Row(
            f"{label}: HTTP batches of 100, {args.batch_connections} connections", mps, "msg/s", anchor_batch
        ),
        _latency(label, b),
    ]
    return rows


def main() -> None:
    parser = bench_parser(__doc__, seconds=10.0, connections=32, batch_connections=8, no_devbroker=False)
    parser.add_argument("--namesrv", help="also against this real RocketMQ name server")
    args = parser.parse_args()
    print(f"HTTP load, 256 B bodies; {environment()}")
    rows: list[Row] = []
    for label, namesrv in targets(args.namesrv, not args.no_devbroker):
        rows += run(label, namesrv, args)
    print_rows("HTTP API vs the direct client in the same run", rows)


if __name__ == "__main__":
    main()
