"""Review of the HTTP protocols' connection handling (app.api.hot_http, app.api.http_protocol) on a raw
socket: each test here fails on the code as reviewed, for the reason in its docstring."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from tests.app.api.test_hot_path import connect, get, post, read_answer, requests_counted
from tests.app.api.test_http_fast_path import edge_of
from tests.app.conftest import Stack


def _server(stack: Stack) -> Any:
    return stack.service.http._server


def one(body: str) -> bytes:
    return b'{"topic": "Hot", "body": "%s"}' % body.encode()


def _held_route(stack: Stack, release: asyncio.Event, entered: asyncio.Event | None = None) -> None:
    """/v1/messages waits for ``release`` before it sends (the same route on both protocols' ways)."""
    edge = edge_of(stack)
    real = edge.fast["/v1/messages"]

    async def held(scope: Any, headers: Any, body: bytes) -> Any:
        if entered is not None:
            entered.set()
        await release.wait()
        return await real(scope, headers, body)

    edge.fast = {**edge.fast, "/v1/messages": held}


def _chunked(body: bytes) -> bytes:
    head = (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    return head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


@pytest.mark.parametrize("way", ["hot", "asgi"])
async def test_a_client_that_half_closes_after_its_request_still_gets_the_answer(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """A client that sends a whole request and then shuts down its sending side (``shutdown(SHUT_WR)``,
    ``nc -N``, a half-closing proxy) waits for the answer on the still open read side. The server closes
    the connection at the EOF instead, the send goes on: the message is delivered and counted 200, but
    the client never gets its answer (and, unanswered, sends again: a duplicate). Both ways: the hot
    protocol (content-length) and uvicorn's (a chunked body)."""
    eof_seen, release = asyncio.Event(), asyncio.Event()
    protocol = _server(stack).config.http_protocol_class
    for cls in (protocol, protocol.fallback):
        real_eof: Callable[..., Any] = cls.eof_received

        def noted(self: Any, _real: Callable[..., Any] = real_eof) -> Any:
            eof_seen.set()
            return _real(self)

        monkeypatch.setattr(cls, "eof_received", noted)
    _held_route(stack, release)
    reader, writer = await connect(stack)
    body = one("half-closed")
    writer.write(post("/v1/messages", body) if way == "hot" else _chunked(body))
    await writer.drain()
    writer.write_eof()
    await asyncio.wait_for(eof_seen.wait(), 10)  # the server has read the request and the EOF
    release.set()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await stack.service.http.requests_done()
    assert [m.body for m in stack.stored("Hot")] == [b"half-closed"]  # delivered
    assert requests_counted(stack, "/v1/messages", 200) == 1  # and counted as answered 200
    assert answer.startswith(b"HTTP/1.1 200"), answer  # actual: b"" (closed unanswered)


async def test_a_read_deadline_on_a_pipelined_body_does_not_lose_the_answer_in_flight(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """Request 1 is being answered (its send at work) while request 2, pipelined behind it, is still
    arriving. Request 2's read deadline passes: the connection half-closes (lingering) at once, and
    request 1's answer, written after the FIN, is dropped ("Cannot call write() after write_eof()"),
    though its message was delivered and counted 200. The client, unanswered, sends it again: a
    duplicate. (The refused-request variant of this is already guarded: see test_hot_path's
    test_a_hot_answer_owed_before_a_malformed_request_is_not_lost_to_its_read_deadline.)"""
    entered, release = asyncio.Event(), asyncio.Event()
    _held_route(stack, release, entered)
    reader, writer = await connect(stack)
    second = post("/v1/messages", one("r2"))
    writer.write(post("/v1/messages", one("r1")) + second[:-3])  # request 2's body incomplete
    await entered.wait()
    connection: Any
    (connection,) = _server(stack).server_state.connections
    for _ in range(1000):  # request 2's head is read: same read, or the next
        if connection._reading is not None:
            break
        await asyncio.sleep(0)
    assert connection._reading is not None
    deadline = connection._deadline  # read_timeout_s later, request 1's send still at work
    deadline._deadline = asyncio.get_running_loop().time()
    deadline._check()
    release.set()
    first = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await stack.service.http.requests_done()
    assert [m.body for m in stack.stored("Hot")] == [b"r1"]  # delivered
    assert requests_counted(stack, "/v1/messages", 200) == 1
    assert first.startswith(b"HTTP/1.1 200"), first  # actual: b"" (FIN, no answer)


async def test_a_client_that_reads_nothing_cannot_grow_the_write_buffer_after_a_handover(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write backpressure is lost at the handover to uvicorn: the hot protocol hands over a transport
    already past its high-water mark (its pause_writing was called on the hot protocol, and the
    transport calls it once), resumes reading, and uvicorn's fresh protocol believes writes flow: it
    reads and answers pipelined requests without end into the transport's buffer, for a client that
    never reads. Memory grows with every request the client sends (uvicorn alone, or the hot protocol
    alone, stop at the high-water mark)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # a client that reads nothing, holds little
    sock.setblocking(False)
    state = _server(stack).server_state
    try:
        await loop.sock_connect(sock, ("127.0.0.1", stack.service.http.port))
        for _ in range(1000):
            if state.connections:
                break
            await asyncio.sleep(0)
        connection: Any
        (connection,) = state.connections
        transport = connection.transport
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        high = 1024  # small kernel buffers and high-water mark: a few answers fill them
        transport.set_write_buffer_limits(high=high)
        handed: list[tuple[int, Any]] = []
        hand_over = connection._hand_over

        def noted() -> None:
            ready = not connection._answering and not connection._queue
            before = transport.get_write_buffer_size()
            hand_over()
            if ready and connection.transport is None:
                handed.append((before, transport.get_protocol()))

        connection._hand_over = noted
        gets = 60
        answered, responses = asyncio.Event(), [0]
        fallback = _server(stack).config.http_protocol_class.fallback
        on_response_complete = fallback.on_response_complete

        def counted(self: Any) -> None:
            on_response_complete(self)
            responses[0] += 1
            if responses[0] > gets:
                answered.set()

        monkeypatch.setattr(fallback, "on_response_complete", counted)
        hot = b"".join(post("/v1/messages", one(f"w{i}")) for i in range(40))
        await loop.sock_sendall(sock, hot + get("/healthz") * (gets + 1))  # one small write: read whole
        for _ in range(100000):
            if handed:
                break
            await asyncio.sleep(0)
        assert handed, "not handed over"
        (before, inner) = handed[0]
        assert before > high  # the precondition: writes were paused when the connection was handed over
        if not inner.flow.write_paused:  # believes writes flow: it answers everything it read
            await asyncio.wait_for(answered.wait(), 10)
        grown = transport.get_write_buffer_size() - before
    finally:
        sock.close()
    assert grown < 2048, f"{grown} bytes more buffered for a client that reads nothing"


async def test_a_head_begun_while_an_answer_is_owed_keeps_its_read_deadline(stack: Stack) -> None:
    """Request 2's head began (its read deadline armed at its first byte, read_timeout_s) while request
    1 was answered; the answer replaces that deadline with the keep-alive one (timeout_keep_alive, 5 s
    against 30 s), as if the connection were idle: the request still arriving is cut off early (or,
    begun long before, given more than read_timeout_s)."""
    entered, release = asyncio.Event(), asyncio.Event()
    _held_route(stack, release, entered)
    reader, writer = await connect(stack)
    second = post("/v1/messages", one("d2"))
    writer.write(post("/v1/messages", one("d1")) + second[:20])  # request 2: its head begun
    await entered.wait()
    connection: Any
    (connection,) = _server(stack).server_state.connections
    for _ in range(1000):
        if connection._deadline._deadline is not None:
            break
        await asyncio.sleep(0)
    read_deadline = connection._deadline._deadline  # armed at request 2's first byte
    assert read_deadline is not None
    release.set()
    status, _, _ = await asyncio.wait_for(read_answer(reader), 10)
    after = connection._deadline._deadline
    writer.close()
    assert status == 200
    assert connection.keep_alive_s < connection.read_timeout_s
    assert after is not None and after >= read_deadline, (after, read_deadline)


def _note_eof(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Set once either protocol has read the client's EOF."""
    eof_seen = asyncio.Event()
    protocol = _server(stack).config.http_protocol_class
    for cls in (protocol, protocol.fallback):
        real_eof: Callable[..., Any] = cls.eof_received

        def noted(self: Any, _real: Callable[..., Any] = real_eof) -> Any:
            eof_seen.set()
            return _real(self)

        monkeypatch.setattr(cls, "eof_received", noted)
    return eof_seen


_CUT_HEAD = b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-"


@pytest.mark.parametrize("cut", ["head", "body"])
@pytest.mark.parametrize("way", ["hot", "asgi"])
async def test_a_client_that_half_closes_mid_request_gets_the_answers_owed_then_the_close(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, way: str, cut: str
) -> None:
    """Request 1 is whole and being answered, request 2 is cut short (its head or its body) by the client's
    half-close: request 2 will never end, so it is not waited for, but request 1's answer is owed (its
    send at work) and goes out before the close. (Added with the fix: the unfinished request's branch.)"""
    eof_seen, entered, release = _note_eof(stack, monkeypatch), asyncio.Event(), asyncio.Event()
    _held_route(stack, release, entered)
    reader, writer = await connect(stack)
    first = post("/v1/messages", one("r1")) if way == "hot" else _chunked(one("r1"))
    second = post("/v1/messages", one("r2")) if way == "hot" else _chunked(one("r2"))
    writer.write(first + (_CUT_HEAD if cut == "head" else second[:-7]))
    await writer.drain()
    await entered.wait()
    writer.write_eof()
    await asyncio.wait_for(eof_seen.wait(), 10)
    release.set()
    answer = await asyncio.wait_for(reader.read(), 10)  # b"" until the server closes
    writer.close()
    await stack.service.http.requests_done()
    assert [m.body for m in stack.stored("Hot")] == [b"r1"]
    assert requests_counted(stack, "/v1/messages", 200) == 1
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert answer.count(b"HTTP/1.1 ") == 1, answer


@pytest.mark.parametrize("way", ["hot", "asgi"])
async def test_a_client_that_half_closes_mid_request_with_nothing_owed_is_closed_at_once(
    stack: Stack, way: str
) -> None:
    """Nothing owed and a request that will never end: the connection closes at the EOF (not at its read
    deadline), nothing sent. (A guard for the fix: it passed before it too.)"""
    reader, writer = await connect(stack)
    request = post("/v1/messages", one("cut")) if way == "hot" else _chunked(one("cut"))
    writer.write(request[:-7])
    await writer.drain()
    writer.write_eof()
    answer = await asyncio.wait_for(reader.read(), 10)  # read deadline 30 s: this is the EOF's close
    writer.close()
    await stack.service.http.requests_done()
    assert answer == b""
    assert stack.stored("Hot") == []


async def test_a_read_deadline_on_a_pipelined_head_does_not_lose_the_answer_in_flight(stack: Stack) -> None:
    """As the pipelined-body case above, with request 2's head cut short: the deadline closed the connection
    at once (a plain close), and request 1's answer, its send going on, was lost. (Added with the fix.)"""
    entered, release = asyncio.Event(), asyncio.Event()
    _held_route(stack, release, entered)
    reader, writer = await connect(stack)
    writer.write(post("/v1/messages", one("h1")) + _CUT_HEAD)
    await entered.wait()
    connection: Any
    (connection,) = _server(stack).server_state.connections
    for _ in range(1000):  # request 2's head has begun (its read deadline armed): same read, or the next
        if connection._deadline._deadline is not None:
            break
        await asyncio.sleep(0)
    assert connection._deadline._deadline is not None and connection._reading is None
    deadline = connection._deadline
    deadline._deadline = asyncio.get_running_loop().time()
    deadline._check()
    release.set()
    first = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await stack.service.http.requests_done()
    assert [m.body for m in stack.stored("Hot")] == [b"h1"]
    assert requests_counted(stack, "/v1/messages", 200) == 1
    assert first.startswith(b"HTTP/1.1 200"), first
