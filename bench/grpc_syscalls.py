"""System calls per gRPC unary call: the no-op aio floor, the relay floor and the sidecar (issue 32).

On a machine shared by many, CPU time per call moves 2-4x between runs with the load; the number of
system calls a server makes per call does not. Each server is driven by the same h2load unary load as
``bench.compare`` while ``strace -c -f`` counts its calls (all threads); the count is divided by the calls
it answered (the sidecar's by its own /metrics count of sent messages). strace slows the process, so no
rates or times are printed: only counts per call, the total and the most frequent calls.

    .venv/bin/python -m bench.grpc_syscalls [--namesrv 127.0.0.1:9876] [--seconds 6]    # needs strace
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench.common import bench_parser, free_port, straced, tools_or_exit
from bench.compare import GrpcLoad, _outcomes, grpc_loads, h2load
from bench.floor import master_of
from bench.grpc_floor import grpc_floor
from bench.sidecar_process import sidecar_process


def counted(pid: int, addr: str, load: GrpcLoad, seconds: float) -> tuple[float, dict[str, int]]:
    """(calls h2load completed, {system call: count}) while ``load`` runs against ``addr``."""
    calls, text = straced(
        pid, ["-c"], lambda: h2load(addr, load.method, load.body, load.clients, load.streams, seconds)
    )
    return calls, table(text)


def table(text: str) -> dict[str, int]:
    """strace -c's summary as {system call: calls}."""
    rows: dict[str, int] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[3].isdigit() and f[-1] not in ("total", "syscall"):
            rows[f[-1]] = int(f[3])
    return rows


def line(name: str, calls: float, rows: dict[str, int]) -> str:
    top = sorted(rows.items(), key=lambda kv: -kv[1])[:8]
    per = ", ".join(f"{k} {v / calls:.2f}" for k, v in top)
    total = sum(rows.values()) / calls
    return f"{name:<8} {int(calls):>7} calls  {total:6.2f} system calls per call  ({per})"


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="the real RocketMQ name server")
    parser.add_argument("--seconds", type=float, default=6.0, help="h2load's duration per server")
    args = parser.parse_args()
    tools_or_exit("bench.grpc_syscalls", {"strace": "strace", "h2load": "nghttp2-client"})
    topic = f"RsSys{int(time.time())}"
    unary = grpc_loads(topic)[0]
    with tempfile.TemporaryDirectory() as data:
        grpc_addr = f"127.0.0.1:{free_port()}"
        with sidecar_process(args.namesrv, Path(data), GRPC_ADDR=grpc_addr) as (url, proc):
            h2load(grpc_addr, unary.method, unary.body, 8, 4, 2)  # warm up; creates the topic
            relay = (*asyncio.run(master_of(args.namesrv, topic)), topic)
            for kind in ("aio", "relay"):
                port = free_port()
                with grpc_floor(port, kind, relay=relay if kind == "relay" else ()) as floor:
                    calls, rows = counted(floor.pid, f"127.0.0.1:{port}", unary, args.seconds)
                    print(line(kind, calls, rows), flush=True)
            before = _outcomes(url).get("sent", 0.0)
            _, rows = counted(proc.pid, grpc_addr, unary, args.seconds)
            sent = _outcomes(url).get("sent", 0.0) - before
            print(line("sidecar", max(sent, 1.0), rows), flush=True)


if __name__ == "__main__":
    main()
