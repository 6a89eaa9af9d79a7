"""bench.consume's per-message floor: it must really pull every message and POST each one to the app,
once, or the push path's ratio to it means nothing."""

from __future__ import annotations

import asyncio

from bench.consume import fill, relay_rate
from bench.http_wire import read_message
from rocksidecar.devbroker import DevCluster


async def test_relay_posts_each_message_once_with_its_body(cluster: DevCluster) -> None:
    bodies: list[bytes] = []

    async def app(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                _, body = await read_message(reader)
                bodies.append(body)
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    await fill(cluster.namesrv_addr, 300, 16)
    server = await asyncio.start_server(app, "127.0.0.1", 0)
    try:
        got = await relay_rate(cluster.namesrv_addr, 300, server.sockets[0].getsockname()[1])
    finally:
        server.close()
    assert len(bodies) == 300 and set(bodies) == {b"b" * 16}
    assert got.per_s > 0 and got.cpu_us > 0
