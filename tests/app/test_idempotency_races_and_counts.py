"""Review (session 30): the Idempotency-Key store, metrics and operator state. Each test here fails on
the code as it was reviewed and names the defect it proves."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.idempotency import CF_ANSWERS, COLUMN_FAMILIES, Answer, IdempotencyStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.memory import MemoryKV
from tests.app.conftest import Stack

WINDOW_S = 60


class _SlowSyncKV(MemoryKV):
    """A MemoryKV whose WAL sync blocks while ``hold`` is set (a slow fsync under load): the group-commit
    writer is busy with one batch, and writes queued meanwhile wait for the next one, unapplied."""

    def __init__(self) -> None:
        super().__init__((*COLUMN_FAMILIES, "other"))
        self.hold = False
        self.syncing = threading.Event()
        self.release = threading.Event()

    def sync_wal(self) -> None:
        super().sync_wal()
        if self.hold:
            self.syncing.set()
            self.release.wait(10)


async def test_a_purge_round_does_not_delete_the_new_answer_of_a_reused_key_kept_at_the_same_time() -> None:
    """A key whose answer expired is used again (a client keying by order id, a day later) while a purge
    round drops the old answer. The purge reads the old answer (the new one is queued in the group-commit
    writer behind a sync, not applied yet) and queues a Delete of the key's answer; the writer applies
    the keep's Put and then the purge's Delete: the new answer is gone, and the new request's retry sends
    the message again under the same Idempotency-Key."""
    kv = _SlowSyncKV()
    writer = GroupCommitWriter(kv)
    clock = {"now": 1_000}
    store = IdempotencyStore(kv, writer, window_s=WINDOW_S, now_ms=lambda: clock["now"])
    sends: list[str] = []
    computed = asyncio.Event()

    def send(name: str) -> Callable[[], Awaitable[Answer]]:
        async def compute() -> Answer:
            sends.append(name)
            computed.set()
            return 200, {"status": "SENT", "id": name}

        return compute

    assert await store.run("order-7", "fp", send("old")) == (200, {"status": "SENT", "id": "old"})

    clock["now"] += WINDOW_S * 1000 + 1_000  # the old answer is past the window
    kv.hold = True
    busy = asyncio.create_task(writer.write([Put("other", b"x", b"")]))  # some other synced write
    await asyncio.to_thread(kv.syncing.wait, 10)  # the writer is in its sync
    kv.hold = False
    computed.clear()
    first = asyncio.create_task(store.run("order-7", "fp", send("new")))
    await computed.wait()  # sent; its answer's keep was queued in that same step
    purge = asyncio.create_task(store.purge())
    await asyncio.sleep(0)  # the purge's first step: it read the key's answer and queued its deletes
    kv.release.set()
    await asyncio.wait_for(asyncio.gather(busy, first, purge), 10)
    assert first.result() == (200, {"status": "SENT", "id": "new"})
    assert kv.get(CF_ANSWERS, b"order-7") is not None, "the purge deleted the answer kept just now"

    # the client retries the new request (its answer was lost on the way): it must be replayed
    answer = await store.run("order-7", "fp", send("again"))
    assert sends == ["old", "new"], f"sent again under the same Idempotency-Key: {sends}"
    assert answer == (200, {"status": "SENT", "id": "new"})
    await store.close(grace_s=0)
    await writer.close()


def _rejected(stack: Stack) -> float:
    value = stack.service.metrics.registry.get_sample_value(
        "rocksidecar_messages_total", {"outcome": "rejected"}
    )
    return value or 0.0


async def test_a_message_refused_for_its_idempotency_key_is_counted_rejected_as_other_bad_input(
    stack: Stack,
) -> None:
    """rocksidecar_messages_total{outcome="rejected"} counts bad input (its HELP says so), and a request
    with a bad ack is counted there; the same request refused 400 for an Idempotency-Key of 256
    characters was counted nowhere, on HTTP and on gRPC alike: a client whose every message is refused
    for its key shows no rejected messages at all."""
    doc = {"topic": "IdemBadKey", "body": "x"}
    bad_ack = await stack.http.post("/v1/messages?ack=bogus", json=doc, headers={"Idempotency-Key": "k"})
    assert bad_ack.status_code == 400
    assert _rejected(stack) == 1  # the rule for bad input

    bad_key = await stack.http.post("/v1/messages", json=doc, headers={"Idempotency-Key": "k" * 256})
    assert bad_key.status_code == 400 and bad_key.json()["field"] == "Idempotency-Key"
    assert _rejected(stack) == 2, "an HTTP message refused for its Idempotency-Key was not counted"


async def test_a_grpc_message_refused_for_its_idempotency_key_is_counted_rejected(stack: Stack) -> None:
    """gRPC as HTTP: a Send refused INVALID_ARGUMENT for an idempotency_key of 256 characters is bad
    input, counted nowhere (a Send refused for a bad message is counted rejected)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        stub = pb_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as bad_message:
            await stub.Send(pb.SendRequest(message=pb.Message(topic="", body="x"), idempotency_key="k"))
        assert bad_message.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _rejected(stack) == 1  # the rule for bad input
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Send(
                pb.SendRequest(message=pb.Message(topic="IdemBadKey", body="x"), idempotency_key="k" * 256)
            )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _rejected(stack) == 2, "a gRPC message refused for its idempotency_key was not counted"
    assert stack.stored("IdemBadKey") == []


class _HeldWriter:
    """A group-commit writer whose writes wait until ``release`` (a disk stalled under the stop)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def write(self, ops: list[Put]) -> None:
        self.entered.set()
        await self.release.wait()


async def test_a_caller_still_waiting_when_the_stop_cancels_the_keeping_of_its_sent_answer_gets_it() -> None:
    """The stop (IdempotencyStore.close) cancels a first request whose message the broker already took
    while its answer is being kept (the writer stalled). A repeat waiting on that key is handed the
    answer (200 SENT), but the first request's own caller, still connected, is answered 503 "the request
    was not answered; retry it with the same key": the client is told a stored message failed, and its
    retry, after the restart, sends it again when the keep that was cut short never reached the disk."""
    writer = _HeldWriter()
    store = IdempotencyStore(
        MemoryKV(COLUMN_FAMILIES),
        writer,  # type: ignore[arg-type]
        window_s=WINDOW_S,
        now_ms=lambda: 1_000,
    )
    sends: list[str] = []

    async def send() -> Answer:
        sends.append("first")
        return 200, {"status": "SENT", "id": "A"}

    caller = asyncio.create_task(store.run("k", "fp", send))
    await writer.entered.wait()  # sent; the answer is being kept
    # A repeat meanwhile waits for the answer to be kept (answered before, a SIGKILL would have the
    # restarted sidecar send again under the key whose answer this client holds) ...
    repeat = asyncio.create_task(store.run("k", "fp", send))
    await asyncio.sleep(0)
    assert not repeat.done()
    await asyncio.wait_for(store.close(grace_s=0), 10)  # the writer is still stalled: the keep is cut
    # ... and is handed it when the stop cuts the keeping short (503 would have it resend)
    assert await asyncio.wait_for(repeat, 10) == (200, {"status": "SENT", "id": "A"})
    done, _ = await asyncio.wait({caller}, timeout=10)
    assert caller in done
    assert sends == ["first"]
    assert caller.exception() is None, f"a sent message was answered: {caller.exception()!r}"
    assert caller.result() == (200, {"status": "SENT", "id": "A"})
