"""The hot routes answered by our own HTTP protocol (app.api.hot_http, issues 18 and 26): no ASGI cycle for
an admitted hot request, the rest handed to uvicorn, and everything HTTP/1.1 promises still holds on a
raw socket: pipelined answers in order, ``Connection: close``, a client gone mid-body, a failing route,
a graceful stop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest

from rocksidecar.app.api import hot_http
from rocksidecar.app.api.middleware import EdgeMiddleware
from tests.app.api.test_http_fast_path import edge_of
from tests.app.conftest import Stack

ONE = b'{"topic": "Hot", "body": "x"}'


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", "content-type: application/json"]
    head += [f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status_line = await reader.readline()
    assert status_line, "the connection closed before an answer"
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body


async def connect(stack: Stack) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", stack.service.http.port)


class AsgiCalls:
    """Stands in for the app's ASGI edge and records each request that takes the ASGI way."""

    def __init__(self, edge: Any) -> None:
        self.edge = edge
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.paths.append(scope.get("path", ""))
        await self.edge(scope, receive, send)


def requests_counted(stack: Stack, route: str, code: int) -> float:
    labels = {"api": "http", "route": route, "code": str(code)}
    return stack.service.metrics.registry.get_sample_value("rocksidecar_requests_total", labels) or 0.0


async def test_an_admitted_hot_request_takes_no_asgi_cycle_and_the_rest_do(stack: Stack) -> None:
    app = stack.service.http._app
    calls = AsgiCalls(app.edge)
    app.edge = calls
    hot = await stack.http.post("/v1/messages", content=ONE, headers={"content-type": "application/json"})
    assert hot.status_code == 200 and hot.json()["status"] == "SENT"
    assert calls.paths == []
    refused = await stack.http.post("/v1/messages", content=ONE, headers={"content-type": "text/plain"})
    assert refused.status_code == 415  # the guards refuse it the ASGI way, as before

    async def chunks() -> AsyncIterator[bytes]:
        yield ONE

    chunked = await stack.http.post(
        "/v1/messages", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 200  # a body of unknown length is bounded the ASGI way
    assert (await stack.http.get("/healthz")).status_code == 200
    assert calls.paths == ["/v1/messages", "/v1/messages", "/healthz"]
    assert [m.body for m in stack.stored("Hot")] == [b"x", b"x"]
    assert requests_counted(stack, "/v1/messages", 200) == 2


async def test_pipelined_requests_are_answered_in_order(stack: Stack) -> None:
    reader, writer = await connect(stack)
    batch = b'{"messages": [{"topic": "Hot", "body": "b1"}, {"topic": "Hot", "body": "b2"}]}'
    writer.write(
        post("/v1/messages", b'{"topic": "Hot", "body": "p1"}')
        + get("/healthz")
        + post("/v1/messages:batch", batch)
        + post("/v1/messages", b'{"topic": "Hot", "body": "p2"}')
        + post("/v1/messages", b'{"topic": "Hot", "body": "p3"}')
    )
    answers = [await read_answer(reader) for _ in range(5)]
    writer.close()
    assert [a[0] for a in answers] == [200] * 5
    docs = [orjson.loads(a[2]) for a in answers]
    assert docs[0]["status"] == "SENT" and docs[1] == {"status": "ok"} and docs[2]["sent"] == 2
    assert docs[3]["status"] == "SENT" and docs[4]["status"] == "SENT"
    by_id = {m.uniq_key: m.body for m in stack.stored("Hot")}
    assert [by_id[docs[i]["id"]] for i in (0, 3, 4)] == [b"p1", b"p2", b"p3"]


async def test_connection_close_is_answered_then_closed(stack: Stack) -> None:
    reader, writer = await connect(stack)
    writer.write(post("/v1/messages", ONE, "connection: close"))
    status, headers, _ = await read_answer(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await reader.read() == b""  # closed by the server
    writer.close()


async def test_a_client_gone_mid_body_is_counted_499_and_nothing_is_sent(stack: Stack) -> None:
    _, writer = await connect(stack)
    writer.write(post("/v1/messages", ONE)[:-5])
    await writer.drain()
    await stack.http.get("/healthz")  # the server has read the partial request by now
    (reading,) = [
        c
        for c in stack.service.http._server.server_state.connections
        if getattr(c, "_reading", None) is not None
    ]
    lost, connection_lost = asyncio.Event(), reading.connection_lost
    reading.connection_lost = lambda exc: (connection_lost(exc), lost.set())
    writer.transport.abort()
    await lost.wait()
    assert requests_counted(stack, "/v1/messages", 499) == 1
    assert stack.stored("Hot") == []


async def test_a_hot_route_that_raises_is_a_500_and_the_connection_closes(stack: Stack) -> None:
    async def broken(scope: Any, headers: Any, body: bytes) -> Any:
        raise RuntimeError("store exploded")

    edge = edge_of(stack)
    edge.fast = {**edge.fast, "/v1/messages": broken}
    reader, writer = await connect(stack)
    writer.write(post("/v1/messages", ONE))
    status, headers, body = await read_answer(reader)
    assert status == 500 and headers["content-type"] == "application/problem+json"
    assert orjson.loads(body)["status"] == 500 and headers["connection"] == "close"
    assert await reader.read() == b""
    writer.close()
    assert requests_counted(stack, "/v1/messages", 500) == 1


async def test_a_pending_hot_answer_is_given_before_a_graceful_stop_closes(
    make_stack: Callable[..., Any],
) -> None:
    async with make_stack() as stack:
        edge = edge_of(stack)
        entered, release = asyncio.Event(), asyncio.Event()
        real = edge.fast["/v1/messages"]

        async def slow(scope: Any, headers: Any, body: bytes) -> Any:
            entered.set()
            await release.wait()
            return await real(scope, headers, body)

        edge.fast = {**edge.fast, "/v1/messages": slow}
        reader, writer = await connect(stack)
        writer.write(post("/v1/messages", ONE))
        await entered.wait()
        (connection,) = stack.service.http._server.server_state.connections
        told, shutdown = asyncio.Event(), connection.shutdown
        connection.shutdown = lambda: (shutdown(), told.set())  # type: ignore[method-assign]
        stopping = asyncio.create_task(stack.service.http.stop())
        await told.wait()  # the server has told the connection to finish
        release.set()
        status, headers, body = await read_answer(reader)
        await stopping
        assert status == 200 and orjson.loads(body)["status"] == "SENT"
        assert headers["connection"] == "close"
        writer.close()


@pytest.mark.parametrize("access_log", [False, True])
async def test_the_protocol_answers_hot_routes_only_when_nothing_wraps_the_edge(
    make_stack: Callable[..., Awaitable[Any]], access_log: bool
) -> None:
    async with make_stack(access_log=access_log) as stack:  # type: ignore[attr-defined]
        server = stack.service.http._server
        hot = getattr(server.config.http_protocol_class, "hot", None)
        assert (hot is None) if access_log else isinstance(hot, EdgeMiddleware)
        r = await stack.http.post("/v1/messages", content=ONE, headers={"content-type": "application/json"})
        assert r.status_code == 200


async def test_a_hot_request_still_arriving_at_a_graceful_stop_is_read_and_answered(
    make_stack: Callable[..., Any],
) -> None:
    async with make_stack() as stack:
        reader, writer = await connect(stack)
        whole = post("/v1/messages", ONE)
        writer.write(whole[:-5])
        await writer.drain()
        await stack.http.get("/healthz")  # the server has read the partial request by now
        server = stack.service.http._server
        (reading,) = [c for c in server.server_state.connections if getattr(c, "_reading", None) is not None]
        told, shutdown = asyncio.Event(), reading.shutdown
        reading.shutdown = lambda: (shutdown(), told.set())
        stopping = asyncio.create_task(stack.service.http.stop())
        await told.wait()
        writer.write(whole[-5:])
        status, headers, body = await read_answer(reader)
        await stopping
        assert status == 200 and orjson.loads(body)["status"] == "SENT"
        assert headers["connection"] == "close"
        writer.close()


async def test_a_lone_answer_is_written_at_once_and_answers_in_flight_together_wait_for_the_turn(
    stack: Stack,
) -> None:
    writes: list[str] = []
    real_now, real_write = hot_http.HotHttp._write_now, hot_http.HotHttp._hold

    def write_now(self: Any, data: bytes) -> None:
        writes.append("now")
        real_now(self, data)

    def write(self: Any, data: bytes) -> None:
        writes.append("held")
        real_write(self, data)

    patch = pytest.MonkeyPatch()
    patch.setattr(hot_http.HotHttp, "_write_now", write_now)
    patch.setattr(hot_http.HotHttp, "_hold", write)
    try:
        reader, writer = await connect(stack)
        writer.write(post("/v1/messages", ONE))
        assert (await read_answer(reader))[0] == 200
        assert writes == ["now"]
        writes.clear()
        for broker in stack.cluster.brokers.values():
            broker.faults.latency_s = 0.05  # the four below are surely in flight together
        others = [await connect(stack) for _ in range(4)]
        for _, w in others:
            w.write(post("/v1/messages", ONE))
        answers = [await read_answer(r) for r, _ in others]
        assert [a[0] for a in answers] == [200] * 4
        assert writes.count("held") >= 3  # answers pending together are held to the loop's turn
        for _, w in [(reader, writer), *others]:
            w.close()
    finally:
        patch.undo()


async def test_a_bad_request_after_a_hot_one_is_answered_by_uvicorn_after_the_hot_answer(
    stack: Stack,
) -> None:
    """The connection is handed to uvicorn from the bad request's first byte, once the answer before it
    is out: uvicorn answers it 400 as it always did, in order."""
    reader, writer = await connect(stack)
    writer.write(post("/v1/messages", ONE) + b"NOT HTTP AT ALL\r\n\r\n")
    first = await read_answer(reader)
    assert first[0] == 200 and orjson.loads(first[2])["status"] == "SENT"
    assert (await reader.readline()).startswith(b"HTTP/1.1 400")
    writer.close()


_TOO_LONG = b"content-length: %d" % (64 * 1024 * 1024)  # past the limit: refused on the header alone


@pytest.mark.parametrize(
    ("changed", "status", "field"),
    [
        ((b"application/json", b"text/plain"), 415, "Content-Type"),
        ((b"host: 127.0.0.1", b"host: evil.example"), 403, "Host"),
        ((b"content-length: %d" % len(ONE), _TOO_LONG), 413, "body"),
    ],
)
async def test_the_kept_verdict_of_a_connection_still_refuses_what_the_guards_refuse(
    stack: Stack, changed: tuple[bytes, bytes], status: int, field: str
) -> None:
    """The protocol keeps the edge's last verdict per connection (same URL and guarded headers): another
    Content-Type, another Host or a body over the limit on the same connection is still refused."""
    reader, writer = await connect(stack)
    writer.write(post("/v1/messages", ONE))
    assert (await read_answer(reader))[0] == 200
    request = post("/v1/messages", ONE).replace(*changed)
    writer.write(request[: request.index(b"\r\n\r\n") + 4] if status == 413 else request)
    answer, _, body = await read_answer(reader)
    writer.close()
    assert answer == status and orjson.loads(body)["field"] == field
    assert [m.body for m in stack.stored("Hot")] == [b"x"]


async def test_a_hot_answer_owed_before_a_malformed_request_is_not_lost_to_its_read_deadline(
    make_stack: Any,
) -> None:
    """The same on the hot protocol (app.api.hot_http, access log off), which hands the malformed
    request to uvicorn's side once the hot answer before it is out: the read deadline armed at the
    malformed request's first byte does not close the connection under the send still at work (the
    client would get neither the send's answer, and retry it: a duplicate, nor the 400)."""
    async with make_stack() as stack:
        edge = edge_of(stack)
        entered, release = asyncio.Event(), asyncio.Event()
        real = edge.fast["/v1/messages"]

        async def slow(scope: Any, headers: Any, body: bytes) -> Any:
            entered.set()
            await release.wait()
            return await real(scope, headers, body)

        edge.fast = {**edge.fast, "/v1/messages": slow}
        reader, writer = await connect(stack)
        try:
            writer.write(post("/v1/messages", ONE) + b"NOT\x01HTTP\r\n\r\n")
            await entered.wait()
            (connection,) = stack.service.http._server.server_state.connections
            for _ in range(1000):  # the malformed bytes read: the same read (one write), or the next
                if connection._handover_at is not None:
                    break
                await asyncio.sleep(0)
            assert connection._handover_at is not None
            await _deadline_passes_hot(connection)  # read_timeout_s later, the send still at work
            release.set()
            first = await asyncio.wait_for(read_answer(reader), 10)
            second = await asyncio.wait_for(read_answer(reader), 10)
        finally:
            release.set()
            writer.close()
    assert (first[0], second[0]) == (200, 400)


async def _deadline_passes_hot(connection: Any) -> None:
    deadline = connection._deadline
    if deadline._deadline is not None:
        deadline._deadline = asyncio.get_running_loop().time()
        deadline._check()
