"""An answer to a peer that reads is never dropped because one large answer of ours paused writes (the
drop bound counts the answers written while paused, not the whole buffer)."""

from __future__ import annotations

import asyncio

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.connection import Connection, connect
from rocksidecar.rmq.protocol.frame import RemotingCommand

BIG, SMALL = 951, 952


async def test_an_answer_to_a_peer_that_reads_is_not_dropped_after_one_large_answer() -> None:
    # Before the mend, Connection.send dropped an answer while writes were paused and over 4 MiB was
    # buffered ("a peer that reads none of the answers"). The buffer's size says nothing of that: one
    # large answer (a devbroker pull of big messages) or our own large requests fill it for a peer that
    # reads on. Here the peer reads everything (the large answer arrives whole), and the answer to its
    # next request, written while the large one drains, was dropped: the request timed out though it was
    # carried out (a SEND to devbroker: stored, reported failed, sent again: a duplicate).
    paused = asyncio.Event()

    class Server(Connection):
        def pause_writing(self) -> None:
            super().pause_writing()
            paused.set()

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == BIG:
            return cmd.response(ResponseCode.SUCCESS, "big", body=b"x" * (12 * 1024 * 1024))
        await paused.wait()  # answered while the large answer is on its way to the peer
        return cmd.response(ResponseCode.SUCCESS, "small")

    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Server("client", handler), "127.0.0.1", 0)
    addr = f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    conn = await connect(addr, 1.0)
    try:
        big = asyncio.ensure_future(conn.invoke(RemotingCommand(BIG), 5.0))
        small = asyncio.ensure_future(conn.invoke(RemotingCommand(SMALL), 2.0))
        big_answer = await big  # the peer reads: the whole large answer arrived
        assert len(big_answer.body) == 12 * 1024 * 1024
        answer = await small  # on HEAD: RequestTimeout, its answer dropped
        assert answer.remark == "small"
    finally:
        conn.close()
        srv.close()
