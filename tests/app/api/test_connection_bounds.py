"""How many connections and header fields a client may open or send (session 14, "bounds"): HTTP
connections past max_connections (one count for the hot protocol's and uvicorn's) are answered 503
problem+json and closed, and counted; a head of more than MAX_HEADER_FIELDS fields is 431 on the hot
routes and the others; gRPC connections past max_connections are closed by grpc core's quota."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rocksidecar.app.api.http_protocol import MAX_HEADER_FIELDS
from tests.app.api.test_hot_path import ONE, get, post, read_answer
from tests.app.conftest import Stack


def refused(stack: Stack) -> float:
    registry = stack.service.metrics.registry
    return registry.get_sample_value("rocksidecar_http_connections_refused_total") or 0.0


class _Watched(set[Any]):
    """The server's set of open connections, telling when one leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.left = asyncio.Event()

    def discard(self, item: Any) -> None:
        super().discard(item)
        self.left.set()


def watched(stack: Stack) -> _Watched:
    """Before any connection: the set both protocols join (each takes it from the state when made)."""
    server = stack.service.http._server
    assert server is not None and not server.server_state.connections
    server.server_state.connections = conns = _Watched()
    return conns


async def opened(stack: Stack, first: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A kept-alive connection whose first request, ``first``, was answered 200."""
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.service.http.port)
    writer.write(first)
    assert (await read_answer(reader))[0] == 200
    return reader, writer


async def test_http_connections_past_the_limit_are_503_closed_and_counted(
    make_stack: Callable[..., Any],
) -> None:
    """Before: no bound; every connection was served (uvicorn's limit_concurrency was unset)."""
    async with make_stack(max_connections=2) as stack:
        conns = watched(stack)
        hot = await opened(stack, post("/v1/messages", ONE))  # the hot protocol's
        other = await opened(stack, get("/healthz"))  # handed to uvicorn's
        reader, writer = await asyncio.open_connection("127.0.0.1", stack.service.http.port)
        writer.write(get("/healthz"))
        status, headers, body = await read_answer(reader)
        assert status == 503 and headers["connection"] == "close"
        assert headers["content-type"] == "application/problem+json" and headers["retry-after"] == "1"
        assert "max_connections" in orjson.loads(body)["detail"]
        assert await reader.read() == b""  # closed
        writer.close()
        assert refused(stack) == 1 and len(conns) == 2
        # an admitted connection handed from the hot protocol to uvicorn's is not counted again
        hot[1].write(get("/healthz"))
        assert (await read_answer(hot[0]))[0] == 200
        # a closed one makes room
        other[1].close()
        async with asyncio.timeout(5):
            while len(conns) > 1:  # the server sees the close on its next read
                conns.left.clear()
                await conns.left.wait()
        again = await opened(stack, post("/v1/messages", ONE))
        assert refused(stack) == 1
        for _, w in (hot, again):
            w.close()


def _fields(n: int) -> list[str]:
    """Header fields that with host, content-type and content-length make ``n``."""
    return [f"x-f{i}: v" for i in range(n - 3)]


@pytest.mark.parametrize("route", ["hot", "uvicorn"])
async def test_a_head_of_too_many_fields_is_431_naming_headers(stack: Stack, route: str) -> None:
    """Before: 10 000 one-byte fields fit under the 64 KiB head bound, each a Python object, all served."""

    def request(n: int) -> bytes:
        if route == "hot":
            return post("/v1/messages", ONE, *_fields(n))
        head = ["GET /healthz HTTP/1.1", "host: 127.0.0.1", *_fields(n + 2)]  # no content-*
        return ("\r\n".join(head) + "\r\n\r\n").encode()

    reader, writer = await asyncio.open_connection("127.0.0.1", stack.service.http.port)
    writer.write(request(MAX_HEADER_FIELDS))
    assert (await read_answer(reader))[0] == 200  # the most fields allowed
    writer.write(request(MAX_HEADER_FIELDS + 1))
    status, headers, body = await read_answer(reader)
    assert status == 431 and headers["connection"] == "close"
    assert orjson.loads(body)["field"] == "headers"
    assert await reader.read() == b""
    writer.close()
    assert [m.body for m in stack.stored("Hot")] == ([b"x"] if route == "hot" else [])


async def _health(port: int, n: int, *, wait: bool = False) -> health_pb2.HealthCheckResponse:
    # each channel its own connection (channels with the same arguments share one)
    options = [("grpc.use_local_subchannel_pool", 1), ("rocksidecar.test.channel", n)]
    if wait:  # the server frees a closed connection's place a moment after the close: the channel
        # re-connects until it is let in, every 0.1-0.2 s (grpc's default back-off grows past 5 s)
        options += [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 200)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return await stub.Check(health_pb2.HealthCheckRequest(), timeout=30, wait_for_ready=wait)


async def test_grpc_connections_past_the_limit_are_closed_by_grpc_core(
    make_stack: Callable[..., Any],
) -> None:
    async with make_stack(max_connections=1) as stack:
        port = stack.service.grpc.port
        options = [("grpc.use_local_subchannel_pool", 1), ("rocksidecar.test.channel", 0)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as kept:
            first = await health_pb2_grpc.HealthStub(kept).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert first.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.aio.AioRpcError) as refused_call:
                await _health(port, 1)
            assert refused_call.value.code() is grpc.StatusCode.UNAVAILABLE
        # room again, once the server has seen the close (the channel retries its connect until then)
        assert (await _health(port, 2, wait=True)).status == health_pb2.HealthCheckResponse.SERVING
