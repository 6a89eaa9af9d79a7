"""README's 431: "a request head (URL and header fields) over 64 KiB ... (`field: headers`; the connection is
then closed)", however the head arrives: whole in one read (a read can be 256 KiB, past the bound), begun
in the middle of a read, across reads, or handed by the hot protocol (app.api.hot_http) to uvicorn's
(app.api.http_protocol). Found by a review: a head of one 100 KiB header field written at once was
answered normally (200 on /healthz, /readyz and POST /v1/messages, 404 on /v1/messages/x), since only the
reads after the one a head began in were counted, and the hot protocol admitted any head it parsed. The
bound itself is exact: a head of MAX_HEAD bytes is served, one byte more is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from rocksidecar.app.api import http_protocol
from rocksidecar.app.api.http_protocol import MAX_HEAD
from tests.app.api.test_hot_path import ONE, connect, post, read_answer
from tests.app.api.test_http_protocol import _guarded
from tests.app.conftest import Stack

HOT_HEAD = len(post("/v1/messages", ONE, "x-pad: ")) - len(ONE)  # the head's bytes but the padding's


def _get(path: str, pad: int) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: {'a' * pad}\r\n\r\n".encode()


GET_HEAD = len(_get("/healthz", 0))


async def _refused_431(reader: asyncio.StreamReader) -> None:
    """The answer is 431 problem+json naming the headers, and the connection is then closed."""
    status, headers, body = await read_answer(reader)
    assert status == 431 and headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close" and orjson.loads(body)["field"] == "headers"
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed (what it still sent is dropped)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/v1/messages/x"])
async def test_a_head_over_64_kib_written_at_once_is_431_on_uvicorns_side(stack: Stack, path: str) -> None:
    reader, writer = await connect(stack)
    writer.write(_get(path, 100 * 1024))  # one header field of 100 KiB, in one read on the server
    try:
        await _refused_431(reader)
    finally:
        writer.close()


async def test_a_head_over_64_kib_written_at_once_is_431_on_the_hot_route(stack: Stack) -> None:
    reader, writer = await connect(stack)
    writer.write(post("/v1/messages", ONE, "x-pad: " + "a" * 100 * 1024))
    try:
        await _refused_431(reader)
    finally:
        writer.close()
    assert stack.stored("Hot") == []


@pytest.mark.parametrize(
    ("pad", "cut"),
    [(MAX_HEAD - HOT_HEAD, MAX_HEAD - 512), (MAX_HEAD + 1024, MAX_HEAD + 512)],
    ids=["MAX_HEAD bytes: held and served", "over: handed over, 431"],
)
async def test_a_head_cut_across_reads_on_the_hot_route(stack: Stack, pad: int, cut: int) -> None:
    """The hot protocol holds an open head up to MAX_HEAD bytes; past them it hands it to uvicorn's side,
    which counts it from its first byte."""
    reader, writer = await connect(stack)
    request = post("/v1/messages", ONE, "x-pad: " + "a" * pad)
    writer.write(request[:cut])  # inside the padding: the head is not complete
    await writer.drain()
    await stack.http.get("/healthz")  # the server has read the partial head by now
    writer.write(request[cut:])
    try:
        if pad > MAX_HEAD:
            await _refused_431(reader)
        else:
            status, _, body = await read_answer(reader)
            assert status == 200 and orjson.loads(body)["status"] == "SENT"
    finally:
        writer.close()
    assert [m.body for m in stack.stored("Hot")] == ([] if pad > MAX_HEAD else [b"x"])


@pytest.mark.parametrize("over", [0, 1], ids=["MAX_HEAD bytes: served", "one byte more: 431"])
@pytest.mark.parametrize("route", ["hot POST /v1/messages", "uvicorn's GET /healthz"])
async def test_the_bound_is_exact_on_both_sides(stack: Stack, route: str, over: int) -> None:
    if route.startswith("hot"):
        request = post("/v1/messages", ONE, "x-pad: " + "a" * (MAX_HEAD - HOT_HEAD + over))
        assert len(request) - len(ONE) == MAX_HEAD + over
    else:
        request = _get("/healthz", MAX_HEAD - GET_HEAD + over)
        assert len(request) == MAX_HEAD + over
    reader, writer = await connect(stack)
    writer.write(request)
    try:
        if over:
            await _refused_431(reader)
        else:
            assert (await read_answer(reader))[0] == 200
    finally:
        writer.close()


async def test_a_head_begun_behind_pipelined_requests_counts_its_bytes_in_that_read() -> None:
    """uvicorn's side, on a fake connection: a read of whole requests and the start of a head, the head
    then completed in the next read. What the head has in the first read counts: MAX_HEAD bytes in all
    are served, one more is refused."""
    for over, expected in ((0, [b"204", b"204", b"204"]), (1, [b"204", b"204", b"431"])):

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        protocol, connection, state = await _guarded(app)
        head = _get("/healthz", MAX_HEAD - GET_HEAD + over)
        first = MAX_HEAD // 2  # of the head, in the first read
        protocol.data_received(_get("/healthz", 0) * 2 + head[:first])
        protocol.data_received(head[first:])
        while state.tasks:
            await asyncio.gather(*state.tasks)
        await asyncio.sleep(0)
        statuses = [
            line.split()[1]
            for line in b"".join(connection.writes).split(b"\r\n")
            if line.startswith(b"HTTP/")
        ]
        assert statuses == expected, over
        assert (connection.events[-2:] == ["write", "eof"]) == bool(over)  # refused: closed (lingering)
        protocol.connection_lost(None)


async def test_a_read_over_max_head_of_whole_requests_is_served_whole() -> None:
    """A read longer than MAX_HEAD is parsed in pieces; a body longer than MAX_HEAD and the head after it
    are not mistaken for a head over the bound."""
    bodies: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        bodies.append(size)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    body = b"b" * (3 * http_protocol.MAX_HEAD)
    big = b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    protocol.data_received(big + _get("/healthz", 0))
    while len(bodies) < 2:
        await asyncio.gather(*state.tasks)
    await asyncio.sleep(0)
    assert bodies == [len(body), 0] and b" 431 " not in b"".join(connection.writes)
    protocol.connection_lost(None)
