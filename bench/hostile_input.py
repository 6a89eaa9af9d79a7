"""Hostile input against a running sidecar (issue 11, items 6 and 7): how long a huge request holds the
event loop, and what it costs in memory.

  python -m bench.hostile_input [--items 1000000] [--chunked-mib 1024]

Starts `rocksidecar serve --devbroker`, then
- posts a batch of ``--items`` tiny messages (25 MB for a million) while /healthz is polled every 10 ms:
  prints the answer, its time, the longest /healthz wait (the event loop's stall) and the sidecar's peak
  RSS (VmHWM) before and after;
- streams a chunked body of ``--chunked-mib`` MiB to /v1/messages: prints the answer and how much of the
  body the sidecar read before it, and the peak RSS after.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import bench_parser, memory_kb
from bench.sidecar_process import sidecar_process


def peak_rss_mib(pid: int) -> float:
    return memory_kb(pid).get("VmHWM", 0) / 1024


async def huge_batch(url: str, items: int) -> dict[str, float | int]:
    body = b'{"messages": [' + b",".join([b'{"topic":"T","body":"x"}'] * items) + b"]}"
    worst = 0.0
    done = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def probe() -> None:
            nonlocal worst
            while not done.is_set():
                t = time.perf_counter()
                await client.get("/healthz")
                worst = max(worst, time.perf_counter() - t)
                await asyncio.sleep(0.01)

        prober = asyncio.create_task(probe())
        await asyncio.sleep(0.05)
        t = time.perf_counter()
        r = await client.post(
            "/v1/messages:batch", content=body, headers={"content-type": "application/json"}
        )
        elapsed = time.perf_counter() - t
        done.set()
        await prober
    return {"status": r.status_code, "answer_s": elapsed, "worst_healthz_s": worst, "bytes": len(body)}


async def stream_chunked(host: str, port: int, path: str, total_mib: int) -> tuple[bytes, int]:
    """POST a chunked body of ``total_mib`` MiB, or until the server answers or hangs up: the answer's
    first bytes and the MiB sent."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
        + b"Transfer-Encoding: chunked\r\n\r\n"
    )
    # Read while writing: a server that closes with our data unread sends a reset, which would
    # discard an answer not yet read.
    answer = asyncio.create_task(reader.read(4096))
    chunk = b"%x\r\n%s\r\n" % (1024 * 1024, b"x" * 1024 * 1024)
    sent = 0
    try:
        while sent < total_mib and not answer.done():
            writer.write(chunk)
            await writer.drain()
            sent += 1
        if not answer.done():
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except ConnectionError:
        pass  # hung up: the answer says why
    head = await answer
    writer.close()
    return head, sent


def main() -> None:
    parser = bench_parser(__doc__, items=1_000_000, chunked_mib=1024)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        sidecar_process(None, Path(tmp), LOG_LEVEL="error") as (url, proc),
    ):
        before = peak_rss_mib(proc.pid)
        batch = asyncio.run(huge_batch(url, args.items))
        after_batch = peak_rss_mib(proc.pid)
        print(
            f"batch of {args.items} messages ({batch['bytes'] / 1e6:.1f} MB): {batch['status']} in "
            f"{batch['answer_s']:.3f} s; longest /healthz {batch['worst_healthz_s'] * 1000:.0f} ms; "
            f"peak RSS {before:.0f} -> {after_batch:.0f} MiB"
        )
        if args.chunked_mib:
            host, _, port = url.removeprefix("http://").rpartition(":")
            head, sent = asyncio.run(stream_chunked(host, int(port), "/v1/messages", args.chunked_mib))
            print(
                f"chunked body of {args.chunked_mib} MiB: {head[:12].decode(errors='replace')} after "
                f"sending {sent} MiB; peak RSS {peak_rss_mib(proc.pid):.0f} MiB"
            )


if __name__ == "__main__":
    main()
