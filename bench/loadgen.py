"""A small HTTP/1.1 load generator: N keep-alive connections each sending one pre-encoded request after
another for a fixed time; prints JSON with counts and latency percentiles. Runs as its own process.

    python -m bench.loadgen HOST PORT PATH BODY_FILE CONNECTIONS SECONDS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import uvloop

from bench.http_wire import read_message


async def connection(
    host: str, port: int, request: bytes, until: float, latencies: list[float], statuses: dict[int, int]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < until:
            started = time.perf_counter()
            writer.write(request)
            head, _ = await read_message(reader)
            status = int(head[9:12])
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


async def main(
    host: str, port: int, path: str, body: bytes, connections: int, seconds: float
) -> dict[str, object]:
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    started = time.perf_counter()
    await asyncio.gather(
        *(connection(host, port, request, started + seconds, latencies, statuses) for _ in range(connections))
    )
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000 if latencies else 0.0

    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "statuses": statuses,
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "max_ms": latencies[-1] * 1000 if latencies else 0.0,
    }


if __name__ == "__main__":
    h, p, path, body_file, conns, secs = sys.argv[1:7]
    result = uvloop.run(main(h, int(p), path, Path(body_file).read_bytes(), int(conns), float(secs)))
    print(json.dumps(result))
