"""The chunks of one sharding key's messages in a batch are stored in their order (session 31 review).

A batch over the broker's limits (1000 messages or ~4 MiB; here max_batch_messages=2) is cut into
chunks. The chunks of one slot (the queue a sharding key hashes to) were sent concurrently, so one busy or
timed-out answer to the first let the second be stored ahead of it, and a first chunk that failed
outright was spooled while the second was stored. A keyed slot's chunks now go one after another, and
once one fails the later ones are failed (SendFailed, spooled behind it) without being sent.
"""

from __future__ import annotations

import asyncio

from rocksidecar.rmq import Message
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import SendFailed
from rocksidecar.rmq.message_codec import decode_batch
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.fakes import route, send_ok
from tests.rmq.producer.harness import Harness as ProducerHarness

KEY = "customer-7"


async def test_the_chunks_of_one_keyed_batch_are_stored_in_order_when_the_first_is_retried() -> None:
    """One send_batch, four messages of one sharding key, cut into two chunks (the broker's batch limit,
    here max_batch_messages=2; in production 1000 messages or ~4 MiB, e.g. a Spark batch of 500 rows
    under maxBatchBytes 8 MiB). The first chunk's first attempt fails with SYSTEM_BUSY (retriable, retried
    on the same queue). Sent concurrently, the second chunk was stored while the first was retried: the
    queue held m2, m3, m0, m1, every one of them answered SENT."""
    h = ProducerHarness(routes={"T": route({"broker-a": 4})})
    stored: list[bytes] = []
    another_stored = asyncio.Event()
    first_refused = False

    async def handle(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        nonlocal first_refused
        if cmd.code != RequestCode.SEND_BATCH_MESSAGE:
            return await h._handle(addr, cmd)
        bodies = [r.body for r in decode_batch(cmd.body)]
        if b"m0" in bodies and not first_refused:
            first_refused = True
            # A slow broker answering busy: give any concurrent request the time to arrive (none does
            # once chunks of one queue go one after another; then this is a plain 1 s busy answer).
            try:
                await asyncio.wait_for(another_stored.wait(), 1.0)
            except TimeoutError:
                pass
            return cmd.response(ResponseCode.SYSTEM_BUSY, "injected: busy")
        stored.extend(bodies)
        another_stored.set()
        return send_ok(cmd, len(stored) - len(bodies))

    h.invoker.handler = handle
    producer = h.producer(max_batch_messages=2)
    messages = [Message("T", f"m{i}".encode()) for i in range(4)]
    results = await producer.send_batch(messages, [KEY] * 4, validated=True)
    assert [type(r).__name__ for r in results] == ["SendResult"] * 4
    assert [b.decode() for b in stored] == ["m0", "m1", "m2", "m3"]


async def test_a_keyed_chunk_after_one_that_failed_is_not_sent_and_fails_to_be_spooled_behind_it() -> None:
    """The first chunk of a key fails outright (every attempt SYSTEM_ERROR; the budget of one attempt):
    its messages are spooled by the caller. The second chunk must not be stored ahead of them: it is not
    sent, and fails SendFailed (retriable, so spooled too) naming the earlier failure. Unkeyed messages of
    the same batch are not held by it."""
    h = ProducerHarness(routes={"T": route({"broker-a": 4})})
    sent: list[list[bytes]] = []

    async def handle(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code != RequestCode.SEND_BATCH_MESSAGE:
            return await h._handle(addr, cmd)
        bodies = [r.body for r in decode_batch(cmd.body)]
        sent.append(bodies)
        if b"m0" in bodies:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "injected: down")
        return send_ok(cmd, 0)

    h.invoker.handler = handle
    producer = h.producer(max_batch_messages=2, retry_times=0)
    messages = [Message("T", f"m{i}".encode()) for i in range(4)] + [Message("T", b"u0"), Message("T", b"u1")]
    results = await producer.send_batch(messages, [KEY] * 4 + [None, None], validated=True)
    held = results[2:4]
    assert all(isinstance(r, SendFailed) and r.retriable and not r.final for r in results[:4]), results
    assert all("injected: down" in str(r) for r in held), held  # names the failure it waits behind
    assert [type(r).__name__ for r in results[4:]] == ["SendResult"] * 2, results
    assert not any(b"m2" in bodies or b"m3" in bodies for bodies in sent), sent
