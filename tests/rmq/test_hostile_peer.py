"""A broken or malicious peer on the other end of a Connection: a scripted fake peer (a raw socket
server, or the Connection-based one of test_connection) sends what a broker should not. Each case
costs the client bounded work and memory, and fails only the requests it concerns."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from rocksidecar.rmq.codes import FLAG_RESPONSE, RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection, connect
from rocksidecar.rmq.errors import ConnectionClosed, FrameError, RequestTimeout
from rocksidecar.rmq.protocol.frame import FrameDecoder, RemotingCommand, encode
from tests.rmq.test_connection import LONG_TIMEOUT_S, PING, PROMPT_S, Server

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawPeer:
    """A peer that runs ``script`` on each accepted socket: it writes what it likes."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.addr = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self.script, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.addr

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()


async def read_request(reader: asyncio.StreamReader) -> RemotingCommand:
    (length,) = struct.unpack(">i", await reader.readexactly(4))
    (cmd,) = FrameDecoder().feed(struct.pack(">i", length) + await reader.readexactly(length))
    return cmd


async def test_a_flood_of_one_way_requests_runs_a_bounded_number_at_once(server: Server) -> None:
    # Before: one task a request, however many the broker sent (3000 here, all running at once).
    running, most, handled = 0, 0, 0
    release, all_done = asyncio.Event(), asyncio.Event()
    limit, waiting = Connection.peer_running_limit, Connection.peer_waiting_limit
    n = limit + waiting + 500

    async def on_request(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        nonlocal running, most, handled
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1
        handled += 1
        if handled == limit + waiting:
            all_done.set()
        return cmd.response(ResponseCode.SUCCESS)

    client = await connect(server.addr, 1.0, on_request)
    await server.accepted.wait()
    peer = server.conns[0]
    for _ in range(n):
        await peer.invoke_oneway(RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, body=b"half"))
    # A two-way request behind them all: refused at once, SYSTEM_BUSY as Java's full executor answers.
    busy = await peer.invoke(RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO), LONG_TIMEOUT_S)
    assert (busy.code, busy.remark) == (
        ResponseCode.SYSTEM_BUSY,
        "[OVERLOAD]system busy, start flow control for a while",
    )
    assert most == limit and len(client._tasks) == limit and len(client._waiting) == waiting
    assert client.refused_requests == 500 + 1
    release.set()  # the waiting ones run in turn, never more than the limit at once
    await asyncio.wait_for(all_done.wait(), LONG_TIMEOUT_S)
    assert most == limit and handled == limit + waiting and not client._waiting
    # and the connection still serves requests of its own
    assert (await client.invoke(RemotingCommand(PING, {"n": "after"}), LONG_TIMEOUT_S)).remark == "pong after"
    client.close()


async def test_the_bytes_of_waiting_requests_are_bounded(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Connection, "peer_waiting_bytes_limit", 10_000)
    release = asyncio.Event()

    async def on_request(conn: Connection, cmd: RemotingCommand) -> None:
        await release.wait()

    client = await connect(server.addr, 1.0, on_request)
    await server.accepted.wait()
    peer = server.conns[0]
    for _ in range(Connection.peer_running_limit + 3):
        await peer.invoke_oneway(RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, body=b"x" * 4000))
    probe = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, body=b"y" * 4000)
    assert (await peer.invoke(probe, LONG_TIMEOUT_S)).code == ResponseCode.SYSTEM_BUSY
    assert len(client._waiting) == 2 and client._waiting_bytes == 8000 and client.refused_requests == 2
    client.close()
    assert not client._waiting and client._waiting_bytes == 0


async def test_a_response_to_no_request_of_ours_is_counted_and_ignored() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        stray = RemotingCommand(0, remark="not yours", opaque=request.opaque + 1000, flag=FLAG_RESPONSE)
        wrong = RemotingCommand(0, remark="a request where an answer is due", opaque=request.opaque)
        answer = RemotingCommand(0, remark="yours", opaque=request.opaque, flag=FLAG_RESPONSE)
        writer.write(encode(stray) + encode(wrong) + encode(answer) + encode(answer))
        await writer.drain()
        await reader.read()  # until the client goes

    peer = RawPeer(script)
    client = await connect(await peer.start(), 1.0)
    resp = await client.invoke(RemotingCommand(PING), LONG_TIMEOUT_S)
    assert resp.remark == "yours" and not client.is_closed
    assert client.unmatched_responses == 2  # the stray one, and the answer's duplicate
    client.close()
    await peer.close()


async def test_a_peer_that_never_answers_times_each_request_out() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    peer = RawPeer(script)
    client = await connect(await peer.start(), 1.0)
    results = await asyncio.gather(
        *(client.invoke(RemotingCommand(PING), 0.05) for _ in range(20)), return_exceptions=True
    )
    assert all(isinstance(r, RequestTimeout) for r in results)
    assert not client._pending  # nothing is left behind of the requests that timed out
    client.close()
    await peer.close()


async def test_a_peer_that_sends_a_frame_slowly_holds_only_that_frame() -> None:
    # Slowloris: a frame announced at 16 MiB, its bytes trickling in. The buffer never holds more than
    # the frame; the request waiting for it times out; the connection stays as Java's does.
    sent = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(struct.pack(">i", 16 * 1024 * 1024 - 4) + b"\x00")
        await writer.drain()
        sent.set()
        await reader.read()

    peer = RawPeer(script)
    client = await connect(await peer.start(), 1.0)
    with pytest.raises(RequestTimeout):
        await client.invoke(RemotingCommand(PING), 0.05)
    await sent.wait()
    assert len(client._decoder._buf) <= 5 and not client._pending
    client.close()
    await peer.close()


async def answered_with(answer: Callable[[RemotingCommand], bytes], match: str) -> None:
    """A request answered with the bytes ``answer`` makes of it: the request fails with FrameError
    (matching ``match``) and the connection is closed."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answer(await read_request(reader)))
        await writer.drain()
        await reader.read()

    peer = RawPeer(script)
    client = await connect(await peer.start(), 1.0)
    with pytest.raises(FrameError, match=match):
        await client.invoke(RemotingCommand(PING), LONG_TIMEOUT_S)
    assert client.is_closed
    await peer.close()


async def test_a_frame_past_16_mib_closes_the_connection_at_once() -> None:
    await answered_with(lambda request: struct.pack(">i", 0x7FFFFFFF), "bad frame length")


async def test_a_peer_closing_mid_frame_fails_the_waiters_promptly() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        frame = encode(RemotingCommand(0, opaque=request.opaque, flag=FLAG_RESPONSE, body=b"b" * 100))
        writer.write(frame[: len(frame) // 2])
        await writer.drain()
        writer.close()

    peer = RawPeer(script)
    client = await connect(await peer.start(), 1.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ConnectionClosed):
        await client.invoke(RemotingCommand(PING), LONG_TIMEOUT_S)
    assert loop.time() - start < PROMPT_S and client.is_closed
    await peer.close()


async def test_a_header_of_the_wrong_shape_fails_the_connection_as_a_frame_error() -> None:
    # Before: the decoder's TypeError left data_received; asyncio logged a fatal error and the waiter
    # saw "connection lost: 'list' object has no attribute 'items'".
    def answer(request: RemotingCommand) -> bytes:
        header = b'{"code":0,"flag":1,"opaque":%d,"extFields":["a"]}' % request.opaque
        return struct.pack(">ii", 4 + len(header), len(header)) + header

    await answered_with(answer, "extFields")
