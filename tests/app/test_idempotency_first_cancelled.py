"""An Idempotency-Key repeat waiting on a first request that is cancelled computes its own answer."""

from __future__ import annotations

import asyncio

from rocksidecar.app.idempotency import COLUMN_FAMILIES, Answer, IdempotencyStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV


async def test_a_waiting_repeat_is_not_cancelled_with_the_first_request() -> None:
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = IdempotencyStore(kv, writer, window_s=60, now_ms=lambda: 1_000)
    started, never = asyncio.Event(), asyncio.Event()

    async def first_compute() -> Answer:
        started.set()
        await never.wait()  # a send on its way when the client goes away
        return 200, {}

    async def again_compute() -> Answer:
        return 202, {"status": "SPOOLED"}

    first = asyncio.create_task(store.run("k", "fp", first_compute))
    await started.wait()
    waiting = asyncio.Event()

    async def repeat_call() -> Answer:
        waiting.set()  # run() reaches its wait on the first answer in this same step (no await before)
        return await store.run("k", "fp", again_compute)

    repeat = asyncio.create_task(repeat_call())
    await waiting.wait()
    first.cancel()  # the first caller disconnected (gRPC cancels its handler)
    done, _ = await asyncio.wait({repeat}, timeout=10)
    assert repeat in done
    # The repeat's own task was never cancelled: it must get an answer or an error an edge maps (503),
    # not the first caller's CancelledError (grpc.aio then sends no status at all: the call hangs): its
    # own compute runs, as a first request's would.
    assert not repeat.cancelled(), "the repeat was ended by the first caller's CancelledError"
    assert repeat.result() == (202, {"status": "SPOOLED"})
    assert first.cancelled()
    await writer.close()
