"""Broker requests and CPU per message of the gRPC Publish stream (issue 32), the sidecar in this process.

``bench.compare``'s stream load (h2load, 8 connections, streams of 100 messages) against a sidecar
running in this process on a real broker, so that its broker requests can be counted (every
``Connection.invoke``: sends, and the few heartbeats and route queries beside them) along with the
sizes of the batches the send path was given and the process's CPU time (all threads) per message.
Requests per message is what the broker pays for the sidecar's batching; it does not move with the
machine's load as much as CPU per message does.

    .venv/bin/python -m bench.grpc_publish_requests [--namesrv 127.0.0.1:9876] [--seconds 6] [--rounds 3]
"""

from __future__ import annotations

import asyncio
import collections
import resource
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import uvloop

from bench.common import bench_parser, environment, free_port, tools_or_exit
from bench.compare import grpc_loads, h2load
from rocksidecar.app.config import Settings
from rocksidecar.app.service import COLUMN_FAMILIES, Service
from rocksidecar.rmq.connection import Connection
from rocksidecar.storage.rocks import RocksKV


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(namesrv: str, data: Path, seconds: float, rounds: int) -> None:
    requests = [0]
    invoke = Connection.invoke

    async def counted(self: Connection, *args: Any, **kwargs: Any) -> Any:
        requests[0] += 1
        return await invoke(self, *args, **kwargs)

    Connection.invoke = counted  # type: ignore[method-assign]
    port = free_port()
    settings = Settings(
        http_addr="127.0.0.1:0", grpc_addr=f"127.0.0.1:{port}", data_dir=str(data), namesrv=(namesrv,)
    )
    service = Service(settings, kv=RocksKV.open(data / "store", COLUMN_FAMILIES))
    await service.start()
    sizes: collections.Counter[int] = collections.Counter()
    send_batch: Callable[..., Awaitable[Any]] = service.sidecar.send_batch

    async def sized(items: Any, *args: Any) -> Any:
        sizes[len(items)] += 1
        return await send_batch(items, *args)

    service.sidecar.send_batch = sized  # type: ignore[method-assign]
    try:
        load = next(g for g in grpc_loads(f"RsPubReq{int(time.time())}") if g.label == "stream")
        addr = f"127.0.0.1:{port}"
        await asyncio.to_thread(h2load, addr, "Publish", load.body, load.clients, 1, 2)  # warm up
        for n in range(1, rounds + 1):
            sizes.clear()
            requests[0], cpu0 = 0, _cpu_s()
            streams = await asyncio.to_thread(h2load, addr, "Publish", load.body, load.clients, 1, seconds)
            cpu, messages = _cpu_s() - cpu0, max(streams * load.per_call, 1)
            batches = sum(sizes.values())
            mean = sum(k * v for k, v in sizes.items()) / max(batches, 1)
            print(
                f"round {n}: {messages / seconds:,.0f} msg/s,"
                f" {requests[0] / messages:.3f} broker requests per message,"
                f" {batches} send_batch calls of {mean:.1f} messages on average,"
                f" {cpu * 1e6 / messages:.0f} us CPU per message",
                flush=True,
            )
    finally:
        await service.stop()
        Connection.invoke = invoke  # type: ignore[method-assign]


def main() -> None:
    parser = bench_parser(__doc__, namesrv="127.0.0.1:9876", seconds=6.0, rounds=3)
    args = parser.parse_args()
    tools_or_exit("bench.grpc_publish_requests", {"h2load": "nghttp2-client"})
    print(f"bench.grpc_publish_requests: {environment()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "data")
        data.mkdir()
        uvloop.run(measure(args.namesrv, data, args.seconds, args.rounds))  # the loop `serve` runs on


if __name__ == "__main__":
    main()
