"""Review of the transport internals (connection, pool): each test here fails on the code it was written
against and passes once the defect it names is fixed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.connection import SEND_HELD_MAX_BYTES, Connection, connect
from rocksidecar.rmq.errors import RemotingError, RequestTimeout
from rocksidecar.rmq.protocol.frame import FrameDecoder, RemotingCommand
from tests.rmq.test_connection import NEVER, PING, PROMPT_S, Server, counted


async def test_a_request_sent_while_writes_are_paused_still_times_out_at_its_timeout(server: Server) -> None:
    # The broker stopped reading: the transport's buffer is over its high-water mark (pause_writing).
    # A request of 50 ms must fail with RequestTimeout after about 50 ms, not wait for the drain forever.
    conn = await connect(server.addr, 1.0)
    conn.pause_writing()
    try:
        with pytest.raises(RequestTimeout):
            await asyncio.wait_for(conn.invoke(RemotingCommand(NEVER), 0.05), PROMPT_S)
        assert not conn._pending
    finally:
        conn.close()


async def test_a_request_to_a_peer_that_stopped_reading_times_out() -> None:
    # The same with a real socket: a peer that accepts and never reads.
    accepted = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def never_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        accepted.set()

    srv = await asyncio.start_server(never_read, "127.0.0.1", 0)
    addr = f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    conn = await connect(addr, 1.0)
    try:
        await accepted.wait()
        # a big request fills the socket buffers; it times out as it should (nothing paused yet when
        # it was written)
        big = RemotingCommand(RequestCode.SEND_MESSAGE_V2, {"a": "g"}, b"x" * (15 * 1024 * 1024))
        with pytest.raises(RequestTimeout):
            await asyncio.wait_for(conn.invoke(big, 0.05), PROMPT_S)
        assert conn._drain is not None  # writes are paused now: the peer does not read
        with pytest.raises(RequestTimeout):  # the next request, with its own 50 ms, hangs instead
            await asyncio.wait_for(conn.invoke(RemotingCommand(RequestCode.HEART_BEAT), 0.05), PROMPT_S)
    finally:
        conn.close()
        for w in writers:
            w.close()
        srv.close()


async def test_a_one_way_request_while_writes_are_paused_does_not_wait_forever(server: Server) -> None:
    # Java's invokeOneway writes and returns (bounded by its timeout); here a broker that stopped reading
    # holds the caller (an END_TRANSACTION answer in a transaction-check handler slot, an offset commit)
    # for as long as the connection lives. Returning, or failing with a RemotingError, are both fine.
    # The wait is bounded by a timeout as Java's (3 s by default, as its endTransactionOneway): 50 ms here.
    conn = await connect(server.addr, 1.0)
    conn.pause_writing()
    try:
        try:
            await asyncio.wait_for(
                conn.invoke_oneway(RemotingCommand(RequestCode.END_TRANSACTION, {"n": "1"}), 0.05), PROMPT_S
            )
        except RemotingError:
            pass
    finally:
        conn.close()


async def test_the_bytes_of_waiting_requests_count_their_headers_too(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As tests/rmq/test_hostile_peer.py's test_the_bytes_of_waiting_requests_are_bounded, with the bytes
    # in the header (up to 1 MiB a frame) instead of the body: 2000 waiting requests of 1 MiB headers are
    # 2 GiB held, against the 64 MiB the limit promises.
    monkeypatch.setattr(Connection, "peer_waiting_bytes_limit", 10_000)
    release = asyncio.Event()

    async def on_request(conn: Connection, cmd: RemotingCommand) -> None:
        await release.wait()

    client = await connect(server.addr, 1.0, on_request)
    try:
        await server.accepted.wait()
        peer = server.conns[0]
        for _ in range(Connection.peer_running_limit + 3):
            await peer.invoke_oneway(
                RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, {"msgId": "x" * 4000})
            )
        probe = RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "y" * 4000})
        assert (await peer.invoke(probe, PROMPT_S)).code == ResponseCode.SYSTEM_BUSY  # queued instead
        assert len(client._waiting) <= 2 and client.refused_requests >= 2
    finally:
        release.set()
        client.close()


async def test_requests_leaving_while_writes_are_paused_leave_the_drain_to_the_others(server: Server) -> None:
    # The drain is one future every writer waits on: a request that times out or is cancelled while
    # writes are paused must neither cancel it (the others would fail with CancelledError) nor leave a
    # callback on it (one per request, for as long as writes stay paused).
    conn = await connect(server.addr, 1.0)
    conn.pause_writing()
    drain = conn._drain
    assert drain is not None
    try:
        for _ in range(3):
            with pytest.raises(RequestTimeout):
                await asyncio.wait_for(conn.invoke(RemotingCommand(NEVER), 0.05), PROMPT_S)
        with pytest.raises(TimeoutError):  # the caller gives up first: its task is cancelled
            await asyncio.wait_for(conn.invoke(RemotingCommand(NEVER), 30.0), 0.05)
        assert not drain.done() and not drain._callbacks
        waiting = asyncio.create_task(conn.invoke(RemotingCommand(PING, {"n": "r"}), PROMPT_S))
        conn.resume_writing()
        assert (await waiting).remark == "pong r"
    finally:
        conn.close()


async def test_a_one_way_request_waits_its_timeout_for_paused_writes_and_writes_nothing_past_it(
    server: Server,
) -> None:
    # As Java's invokeOneway, which waits its timeout for a permit and writes nothing without one: a
    # caller answering a peer that does not read (a transaction check's END_TRANSACTION per check) adds
    # nothing to the transport's buffer. One that waited while writes resumed is sent then.
    seen: list[str] = []
    conn, counting = await counted(server, seen)
    conn.pause_writing()
    try:
        with pytest.raises(RequestTimeout):
            await conn.invoke_oneway(RemotingCommand(PING, {"n": "late"}), 0.05)
        assert not conn._out and not counting.writes
        sending = asyncio.create_task(conn.invoke_oneway(RemotingCommand(PING, {"n": "b"}), PROMPT_S))
        conn.resume_writing()
        await sending
        assert (await conn.invoke(RemotingCommand(PING, {"n": "c"}), PROMPT_S)).remark == "pong c"
        assert seen == ["b", "c"]
    finally:
        conn.close()


async def test_the_bytes_of_waiting_requests_go_back_to_zero_as_they_are_handled(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The count adds and subtracts the same size per request, header (fields, remark) and body alike.
    monkeypatch.setattr(Connection, "peer_running_limit", 1)
    monkeypatch.setattr(Connection, "peer_waiting_limit", 4)
    release = asyncio.Event()

    async def on_request(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        await release.wait()
        return cmd.response(ResponseCode.SUCCESS)

    client = await connect(server.addr, 1.0, on_request)
    try:
        await server.accepted.wait()
        peer = server.conns[0]
        requests = [
            RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, {"n": str(i)}, b"b", remark="r" * 100)
            for i in range(6)
        ]  # tasks start in order: the first runs, four wait, the sixth is refused once they are there
        sent = [asyncio.create_task(peer.invoke(r, PROMPT_S)) for r in requests]
        assert (await sent[5]).code == ResponseCode.SYSTEM_BUSY
        held = client._waiting_bytes
        assert len(client._waiting) == 4 and held % 4 == 0 and held // 4 > 1 + 100 + 2
        release.set()
        assert [(await s).code for s in sent[:5]] == [ResponseCode.SUCCESS] * 5
        assert client._waiting_bytes == 0 and not client._waiting
    finally:
        release.set()
        client.close()


async def test_answers_to_a_peer_that_reads_none_are_dropped_past_the_bound(server: Server) -> None:
    """Answers (and SYSTEM_BUSY refusals) to a peer that floods requests and reads nothing went into the
    write buffer without end; while writes stay paused, those past SEND_HELD_MAX_BYTES of answers are
    dropped (the peer's requests time out there), and written again once writes resume."""
    conn = await connect(server.addr, 1.0)
    assert conn._transport is not None
    kept = KeptTransport(conn._transport)
    conn._transport = kept  # type: ignore[assignment]
    conn.pause_writing()
    half = b"x" * (SEND_HELD_MAX_BYTES // 2)
    conn.send(RemotingCommand(PING, {"n": "1"}, body=half))
    conn.send(RemotingCommand(PING, {"n": "2"}, body=half))  # the two pass the bound: this one dropped
    conn.send(RemotingCommand(PING, {"n": "3"}))  # a small one still fits
    await asyncio.sleep(0)  # the writes of this turn are flushed on the loop's next one
    assert [f.ext_fields["n"] for f in FrameDecoder().feed(b"".join(kept.writes))] == ["1", "3"]
    assert conn.dropped_answers == 1
    conn.resume_writing()  # the peer read: a full allowance again
    conn.send(RemotingCommand(PING, {"n": "4"}, body=half))
    await asyncio.sleep(0)
    assert conn.dropped_answers == 1 and len(kept.writes) == 2
    conn.close()


class KeptTransport:
    """A client transport that keeps what it is given instead of sending it (a peer reading nothing)."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
