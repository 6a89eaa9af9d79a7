"""The transport under uvicorn's protocol (app.api.http_protocol): one write per answer (issue 18)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
import uvicorn
from uvicorn.server import ServerState

from rocksidecar.app.api import http_protocol, servers
from rocksidecar.app.api.http_protocol import MAX_HEAD, MAX_HEADER_FIELDS, _LingeringTransport
from rocksidecar.app.api.middleware import CLIENT_CLOSED, UNMATCHED
from tests.app.api.test_hot_path import connect, read_answer, requests_counted
from tests.app.conftest import Stack


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        if "eof" in self.events:  # as asyncio's and uvloop's transports
            raise RuntimeError("Cannot call write() after write_eof()")
        self.writes.append(data)
        self.events.append("write")

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.events.append("eof")

    def resume_reading(self) -> None:
        self.events.append("resume")

    def close(self) -> None:
        self.closing = True
        self.events.append("close")


class _Protocol:
    def __init__(self, loop: asyncio.AbstractEventLoop, arriving: bool = False) -> None:
        self.loop = loop
        self.arriving = arriving

    def body_arriving(self) -> bool:
        return self.arriving


async def test_a_head_and_body_written_in_one_turn_go_out_as_one_write() -> None:
    real = _Transport()
    t = _LingeringTransport(real, _Protocol(asyncio.get_running_loop()))  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"{}")
    assert real.writes == []  # held until the loop's next turn
    await asyncio.sleep(0)  # one turn of the loop: what the held write waits for
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    t.write(b"next")
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"next"]


async def test_held_writes_go_out_before_a_close_or_half_close() -> None:
    loop = asyncio.get_running_loop()
    real = _Transport()
    t: Any = _LingeringTransport(real, _Protocol(loop))  # type: ignore[arg-type]
    t.write(b"answer")
    t.close()
    assert real.events == ["write", "close"] and real.writes == [b"answer"]
    await asyncio.sleep(0)
    assert real.writes == [b"answer"]  # not twice
    lingering = _Transport()
    t = _LingeringTransport(lingering, _Protocol(loop, arriving=True))  # type: ignore[arg-type]
    t.write(b"413")
    t.close()
    assert lingering.events[:2] == ["write", "eof"]


async def test_nothing_is_written_after_a_lingering_close_s_fin() -> None:
    """A lingering connection reads on to drain the refused request; uvicorn may answer what it reads
    (a 400 for bytes after the refused head). That write went to a transport past its FIN: the
    transport's RuntimeError, logged as an error for each such connection (found by a raw-HTTP fuzz)."""
    loop = asyncio.get_running_loop()
    lingering = _Transport()
    t: Any = _LingeringTransport(lingering, _Protocol(loop, arriving=True))  # type: ignore[arg-type]
    t.write(b"421")
    t.close()
    t.write(b"400 for what followed")
    await asyncio.sleep(0)  # the held write's flush
    t.write_now(b"and another")
    assert lingering.writes == [b"421"] and lingering.events == ["write", "eof", "resume"]


async def test_an_answer_written_now_goes_out_at_once_after_what_is_held() -> None:
    real = _Transport()
    t = _LingeringTransport(real, _Protocol(asyncio.get_running_loop()))  # type: ignore[arg-type]
    t.write_now(b"alone")
    assert real.writes == [b"alone"]  # no wait for the loop's next turn
    t.write(b"held ")
    t.write_now(b"after")
    assert real.writes == [b"alone", b"held after"]  # in order, one write
    await asyncio.sleep(0)  # the held write's scheduled flush finds nothing left
    assert real.writes == [b"alone", b"held after"]
    real.closing = True
    t.write_now(b"late")
    assert real.writes == [b"alone", b"held after"]


class _Connection(_Transport):
    """A connection's transport for the whole protocol: what uvicorn asks of it, and whether it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 9880), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, *args: Any, **kwargs: Any) -> None:
        pass


async def _guarded(app: Any) -> tuple[Any, _Connection, ServerState]:
    """uvicorn's protocol as the sidecar builds it (app.api.servers), on a fake connection."""
    config = uvicorn.Config(app, lifespan="off", log_config=None)
    config.load()
    state = ServerState()
    protocol = servers._protocol(app, 30.0)(
        config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
    )
    connection = _Connection()
    protocol.connection_made(connection)
    return protocol, connection, state


async def test_pipelined_requests_are_not_read_on_while_earlier_ones_wait() -> None:
    # uvicorn resumed reading after every answer, with requests still queued: a client that pipelined
    # requests without end grew the queue by a read's worth each time (1 GB in 6 s from one connection).
    seen: list[tuple[int, bool]] = []
    protocol: Any = None
    connection: Any = None

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((len(protocol.pipeline), connection.reading))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n" * 4)
    while len(seen) < 4:
        await asyncio.gather(*state.tasks)
    assert seen == [(3, False), (2, False), (1, False), (0, True)]
    assert connection.reading


@pytest.mark.parametrize(
    "piece", [b"x-pad: " + b"a" * 1000 + b"\r\n", b"a" * 1000], ids=["many headers", "one endless value"]
)
async def test_a_head_over_the_limit_is_431_and_never_held_whole(piece: bytes) -> None:
    # uvicorn's parser holds a head of any size: 300 MB of headers took 340 MB, from one connection (and
    # httptools holds a header's value whole until it ends).
    calls: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope)

    protocol, connection, _ = await _guarded(app)
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-first: ")
    fed = 0
    while not connection.writes and fed < 10 * http_protocol.MAX_HEAD:
        protocol.data_received(piece)
        fed += len(piece)
        await asyncio.sleep(0)  # the held answer goes out
    assert fed <= http_protocol.MAX_HEAD + len(piece)
    head, _, body = b"".join(connection.writes).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"connection: close" in head
    assert orjson.loads(body)["field"] == "headers"
    assert connection.events[-2:] == ["write", "eof"] and calls == []  # lingering: closed after LINGER_S
    protocol.data_received(piece * 1000)  # what still comes is dropped, unparsed
    assert len(connection.writes) == 1
    protocol.connection_lost(None)


async def test_a_head_over_the_limit_behind_an_answer_owed_waits_for_it_unread() -> None:
    answer = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await answer.wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\nGET / HTTP/1.1\r\nx-pad: ")
    for _ in range(2 * http_protocol.MAX_HEAD // 4096):
        protocol.data_received(b"a" * 4096)
        if not connection.reading:
            break
    assert not connection.reading  # paused, the head unread past the limit
    await asyncio.sleep(0)
    assert connection.writes == []  # nothing before the first request's answer
    answer.set()
    await asyncio.gather(*state.tasks)
    await asyncio.sleep(0)
    statuses = [
        line.split()[1] for line in b"".join(connection.writes).split(b"\r\n") if line.startswith(b"HTTP/")
    ]
    assert statuses == [b"204", b"431"]
    protocol.connection_lost(None)


async def test_a_head_just_under_the_limit_is_served() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    pad = http_protocol.MAX_HEAD - 1024
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: " + b"a" * pad + b"\r\n\r\n")
    await asyncio.gather(*state.tasks)
    await asyncio.sleep(0)
    assert b"".join(connection.writes).startswith(b"HTTP/1.1 204 ")
    protocol.connection_lost(None)


async def test_pipelined_heads_cut_by_every_read_add_up_to_no_head_over_the_limit() -> None:
    # Each read ends inside a request's head and begins new ones: only a head open across a whole read
    # counts that read (the first version counted each such read whole and answered 431).
    answered = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal answered
        answered += 1
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    one = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
    n, read = 12000, http_protocol.MAX_HEAD + 1000  # reads larger than the limit (uvloop's: 256 KiB)
    stream = one * n
    for at in range(0, len(stream), read):
        while not connection.reading and not connection.closing:
            await asyncio.gather(*state.tasks)
        protocol.data_received(stream[at : at + read])
    while answered < n and state.tasks:
        await asyncio.gather(*state.tasks)
    await asyncio.sleep(0)
    assert answered == n and b" 431 " not in b"".join(connection.writes)
    protocol.connection_lost(None)


class _Accepted(_Connection):
    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


async def test_refused_connections_linger_at_most_as_many_as_admitted_then_close_at_once() -> None:
    # A refused connection is half-closed and read for LINGER_S so the client reads its 503; a flood of
    # them must not hold sockets without bound: past ``most`` lingering ones, closed at once.
    counted: list[int] = []
    limit = http_protocol.ConnectionLimit(1, lambda: counted.append(1))
    state = ServerState()
    state.connections.add(object())  # type: ignore[arg-type]
    first, second = _Accepted(), _Accepted()
    assert not limit.admits(state.connections, first, state)  # type: ignore[arg-type]
    assert first.writes[0].startswith(b"HTTP/1.1 503 ") and first.events == ["write", "eof"]
    assert not limit.admits(state.connections, second, state)  # type: ignore[arg-type]
    assert second.events == ["write", "close"] and len(counted) == 2
    first.protocol.data_received(b"GET / HTTP/1.1\r\n\r\n")  # dropped
    first.protocol.connection_lost(None)
    assert limit.lingering == 0
    state.connections.clear()
    assert limit.admits(state.connections, _Accepted(), state)  # type: ignore[arg-type]


async def test_uvicorns_protocol_refuses_past_the_limit_unless_handed_over() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not served")

    config = uvicorn.Config(app, lifespan="off", log_config=None)
    config.load()
    state = ServerState()
    state.connections.add(object())  # type: ignore[arg-type]
    protocol_class = servers._protocol(app, 30.0, http_protocol.ConnectionLimit(1))
    make = lambda: protocol_class(  # noqa: E731
        config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
    )
    refused = _Accepted()
    make().connection_made(refused)
    assert refused.writes[0].startswith(b"HTTP/1.1 503 ") and len(state.connections) == 1
    handed = make()
    handed.handed_over = True  # app.api.hot_http admitted it already
    handed.connection_made(_Accepted())
    assert len(state.connections) == 2


# What httptools cannot parse: on the hot route (app.api.hot_http hands it to uvicorn's side) and the rest.
MALFORMED = {
    "a Content-Length that is not a number": (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: x\r\n\r\n"
    ),
    "two Content-Length fields": (
        b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"
    ),
    "a control character in the path": b"GET /he\x01lthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED)
async def test_a_request_the_parser_cannot_read_is_400_problem_json_and_closed(
    stack: Stack, raw: bytes
) -> None:
    """README: every error is application/problem+json. Found by a review (session 29): these were
    answered uvicorn's own 400 text/plain "Invalid HTTP request received."."""
    reader, writer = await connect(stack)
    writer.write(raw)
    try:
        status, headers, body = await read_answer(reader)
        assert (status, headers["content-type"], headers["connection"]) == (
            400, "application/problem+json", "close",
        )  # fmt: skip
        assert orjson.loads(body)["status"] == 400
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed
    finally:
        writer.close()


@pytest.mark.parametrize("access_log", [False, True], ids=["hot protocol", "uvicorn's, under the access log"])
async def test_refused_heads_and_unreadable_requests_are_counted_as_unmatched(
    make_stack: Any, access_log: bool
) -> None:
    """README: /metrics counts requests by outcome, (unmatched) for no route. Found by a review (session
    29): a 431 or a 400 written by the protocol itself was counted nowhere. With the access log on, the
    edge is under its middleware (and the hot protocol is off): counted all the same."""
    refused = [
        b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: " + b"a" * MAX_HEAD + b"\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n" + b"x-f: v\r\n" * (MAX_HEADER_FIELDS + 1) + b"\r\n",
        MALFORMED["two Content-Length fields"],
    ]
    async with make_stack(access_log=access_log) as stack:
        for raw in refused:
            reader, writer = await connect(stack)
            writer.write(raw)
            try:
                assert (await read_answer(reader))[0] in (400, 431)
                await asyncio.wait_for(reader.read(), 10)  # closed: counted by then
            finally:
                writer.close()
        counted = [requests_counted(stack, UNMATCHED, code) for code in (431, 400)]
    assert counted == [2.0, 1.0]


def _statuses(connection: _Connection) -> list[bytes]:
    return [
        line.split()[1] for line in b"".join(connection.writes).split(b"\r\n") if line.startswith(b"HTTP/")
    ]


async def test_a_malformed_request_pipelined_behind_a_send_is_not_answered_in_the_send_s_place(
    make_stack: Any,
) -> None:
    """A request the parser cannot read is answered 400, and the connection closed, once the answers owed
    before it are out, as a 431 is. Found by a review (session 29): pipelined behind a complete request
    (a send, on the uvicorn protocol that serves every route when the access log is on, and the non-hot
    routes otherwise), the 400 was written at once, before that request's answer: the client read 400 as
    the answer to its send, which went to the broker all the same (its retry of a "refused" send is a
    duplicate)."""
    async with make_stack(access_log=True) as stack:
        producer = stack.service.sidecar.producer
        original_send, sent = producer.send, asyncio.Event()

        async def send_noted(msg: Any, **kw: Any) -> Any:
            result = await original_send(msg, **kw)
            sent.set()
            return result

        producer.send = send_noted
        reader, writer = await asyncio.open_connection("127.0.0.1", stack.service.http.port)
        body = b'{"topic":"PipeT","body":"x"}'
        send = (
            b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        try:
            writer.write(send + b"NOT\x01HTTP\r\n\r\n")  # one write: the parser meets both in one read
            await writer.drain()
            first = await read_answer(reader)
            second = await read_answer(reader)
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed after the 400
            await asyncio.wait_for(sent.wait(), 10)  # the send went on (a bound, not a wait)
        finally:
            writer.close()
            producer.send = original_send
        assert (first[0], second[0]) == (200, 400), f"answers {first[0]}, {second[0]}"
        assert len(stack.stored("PipeT")) == 1
        assert orjson.loads(second[2])["status"] == 400


BAD_CHUNKED = b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\nzz\r\n"


async def test_a_request_queued_behind_an_answer_owed_whose_body_fails_is_answered_400_in_its_turn() -> None:
    """The parser fails in the body of a pipelined request whose app has not started (an earlier answer
    is owed): it is answered 400 after that answer, in its app's place (the app never runs on half a
    body), and nothing more is read; it does not wait for a body the parser will never finish (the read
    timeout)."""
    answer = asyncio.Event()
    paths: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        paths.append(scope["path"])
        await answer.wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n" + BAD_CHUNKED)
    await asyncio.sleep(0)
    assert connection.writes == [] and not connection.reading  # nothing before the first answer
    answer.set()
    while state.tasks:
        await asyncio.gather(*state.tasks)
    await asyncio.sleep(0)
    assert _statuses(connection) == [b"204", b"400"] and paths == ["/healthz"]
    assert b"application/problem+json" in b"".join(connection.writes)
    assert connection.closing or "eof" in connection.events
    protocol.connection_lost(None)


async def test_a_running_request_whose_body_fails_is_told_the_client_is_gone_and_answered_400_at_once() -> (
    None
):
    """The parser fails in the body of the request whose app runs, reading it: every earlier answer is
    out, so the 400 goes at once, and the app's next receive is http.disconnect (as on a lost connection),
    not a wait for more body until the read timeout; what it writes after is dropped."""
    received: list[dict[str, Any]] = []
    reading = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            received.append(message)
            reading.set()
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    head, _, rest = BAD_CHUNKED.partition(b"zz")
    protocol.data_received(head)
    await asyncio.wait_for(reading.wait(), 10)  # the app has the body's first chunk, waits for more
    protocol.data_received(b"zz" + rest)
    await asyncio.wait_for(asyncio.gather(*state.tasks), 10)
    await asyncio.sleep(0)
    assert [m["type"] for m in received] == ["http.request", "http.disconnect"]
    assert _statuses(connection) == [b"400"]  # the app's 200 after the disconnect went nowhere
    protocol.connection_lost(None)


# A send whose chunked body the parser fails in (the chunk's size line "zz" is not hex).
BAD_CHUNKED_SEND = (
    b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    b"transfer-encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\n"
)


@pytest.mark.parametrize("access_log", [False, True], ids=["hot protocol hands over", "uvicorn's"])
async def test_a_running_request_whose_body_fails_is_counted_once(make_stack: Any, access_log: bool) -> None:
    """One request the parser fails in (its body, its app running) is answered 400 and counted once, as
    (unmatched) 400: its app is told the client is gone (``cycle.disconnected``), and the edge's route
    does not count that as a 499 (client closed), which the client never did."""
    async with make_stack(access_log=access_log) as stack:
        reader, writer = await connect(stack)
        try:
            writer.write(BAD_CHUNKED_SEND)
            await writer.drain()
            status, _, body = await read_answer(reader)
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed after the 400
        finally:
            writer.close()
        await stack.service.http.requests_done()
        assert (status, orjson.loads(body)["status"]) == (400, 400)
        counted = {
            "(unmatched) 400": requests_counted(stack, UNMATCHED, 400),
            "/v1/messages 499": requests_counted(stack, "/v1/messages", CLIENT_CLOSED),
        }
    assert counted == {"(unmatched) 400": 1.0, "/v1/messages 499": 0.0}


async def _deadline_passes(protocol: Any) -> None:
    """The connection's read deadline, as armed now, has passed (as read_timeout_s later)."""
    deadline = protocol._read
    if deadline._deadline is not None:
        deadline._deadline = asyncio.get_running_loop().time()
        deadline._check()


@pytest.mark.parametrize(
    "refused",
    [
        b"NOT\x01HTTP\r\n\r\n",
        b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    ],
    ids=["a malformed head", "a malformed body"],
)
async def test_an_answer_owed_before_a_refused_request_is_not_lost_to_that_request_s_read_deadline(
    refused: bytes,
) -> None:
    """A request the parser cannot read, pipelined behind one whose app is still working, waits for that
    answer (else the client reads no answer to its send, retries it: a duplicate). The read deadline armed
    at its first byte no longer runs while it waits: closing at read_timeout_s (30 s; a send may take up
    to send_timeout_ms, up to 600 s) would lose the answer owed, and the 400."""
    answer = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await answer.wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n" + refused)
    await asyncio.sleep(0)
    assert connection.writes == []  # both wait for the first answer
    await _deadline_passes(protocol)  # read_timeout_s later, the app still at work
    answer.set()
    while state.tasks:
        await asyncio.gather(*state.tasks)
    await asyncio.sleep(0)  # the held write's flush
    assert _statuses(connection) == [b"204", b"400"]
    protocol.connection_lost(None)


# A chunked body whose trailer has more header fields than MAX_HEADER_FIELDS (the parser's on_header
# callback counts trailer fields too).
TRAILER_FLOOD = b"0\r\n" + b"x-t: v\r\n" * 101 + b"\r\n"
CHUNKED_HEAD = b"POST /x HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n"


async def test_a_running_request_whose_trailer_is_refused_is_answered_not_left_to_the_read_timeout() -> None:
    """The parser stops in the body of the request whose app runs, reading it (over MAX_HEADER_FIELDS
    trailer fields). As for a malformed body, its app is told the client is gone and the refusal written
    at once: not parked behind the answer owed to the very request it refuses, the app waiting for body
    that never comes until the read timeout (30 s)."""
    received: list[str] = []
    reading = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            received.append(message["type"])
            reading.set()
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    protocol.data_received(CHUNKED_HEAD)
    await asyncio.wait_for(reading.wait(), 10)  # the app has the first chunk, waits for more
    protocol.data_received(TRAILER_FLOOD)
    try:
        done, _ = await asyncio.wait(set(state.tasks), timeout=5)  # a bound: it ends at once, if at all
        await asyncio.sleep(0)  # the held write's flush
        assert done and received == ["http.request", "http.disconnect"], f"the app got {received}"
        assert len(_statuses(connection)) == 1 and _statuses(connection)[0] in (b"400", b"431")
    finally:
        protocol.connection_lost(None)
        await asyncio.gather(*state.tasks, return_exceptions=True)


async def test_a_queued_request_whose_trailer_is_refused_is_answered_in_its_turn_its_app_not_run() -> None:
    """The same request queued behind an answer owed: in its turn it is refused, as a queued request
    whose body fails is (its app never runs on half a body, waiting for the rest while the refusal waits
    for it, until the read timeout)."""
    answer = asyncio.Event()
    paths: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        paths.append(scope["path"])
        if scope["path"] == "/healthz":
            await answer.wait()
        else:
            while (await receive()).get("more_body"):
                pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, connection, state = await _guarded(app)
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n" + CHUNKED_HEAD + TRAILER_FLOOD)
    await asyncio.sleep(0)
    answer.set()
    try:
        for _ in range(2):  # the first answer's task, then whatever runs in the refused one's turn
            if state.tasks:
                done, _ = await asyncio.wait(set(state.tasks), timeout=5)  # a bound, not a wait
                assert done, f"still waiting: answers {_statuses(connection)}, apps run {paths}"
            await asyncio.sleep(0)
        statuses = _statuses(connection)
        assert paths == ["/healthz"] and statuses[0] == b"204" and statuses[1:] in ([b"400"], [b"431"]), (
            f"answers {statuses}, apps run {paths}"
        )
    finally:
        protocol.connection_lost(None)
        await asyncio.gather(*state.tasks, return_exceptions=True)
