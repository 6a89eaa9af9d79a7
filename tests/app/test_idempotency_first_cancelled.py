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


class SlowWriter:
    """A group-commit writer whose first write (the first request's answer: a sync under load) waits until
    released; with ``kv`` every write lands there, else later ones only pass."""

    def __init__(self, kv: MemoryKV | None = None) -> None:
        self.kv = kv
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.kept = asyncio.Event()

    async def write(self, ops: list) -> None:  # type: ignore[type-arg]
        first = not self.entered.is_set()
        if first:
            self.entered.set()
            await self.release.wait()
        if self.kv is not None:
            self.kv.write(ops, sync=True)
        if first:
            self.kept.set()


async def test_a_repeat_does_not_send_again_when_the_first_was_cancelled_after_its_answer() -> None:
    """Cancelled while its answer was being kept (the message sent), the first request hands the repeat
    that answer: computed again, the message went twice under one key."""
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = SlowWriter()
    store = IdempotencyStore(kv, writer, window_s=60, now_ms=lambda: 1_000)  # type: ignore[arg-type]
    sends: list[str] = []

    async def first_compute() -> Answer:
        sends.append("first")
        return 200, {"status": "SENT", "id": "A"}

    async def again_compute() -> Answer:
        sends.append("repeat")
        return 200, {"status": "SENT", "id": "B"}

    first = asyncio.create_task(store.run("k", "fp", first_compute))
    await writer.entered.wait()  # the first's send is done; its answer is being kept
    waiting = asyncio.Event()

    async def repeat_call() -> Answer:
        waiting.set()
        return await store.run("k", "fp", again_compute)

    repeat = asyncio.create_task(repeat_call())
    await waiting.wait()
    first.cancel()  # the first client disconnects while the dedupe record is being synced
    done, _ = await asyncio.wait({repeat}, timeout=5)
    writer.release.set()
    assert repeat in done
    assert sends == ["first"], f"the message was sent again under the same Idempotency-Key: {sends}"
    assert repeat.result() == (200, {"status": "SENT", "id": "A"})
    # and the first's answer is kept all the same (a later repeat must find it, not send again)
    await asyncio.wait_for(writer.kept.wait(), 5)


async def test_a_repeat_after_the_first_was_cancelled_while_its_answer_is_kept_does_not_send_again() -> None:
    """The first request cancelled while its answer syncs: the key stays in flight until the record is
    written (it was neither in flight nor stored meanwhile, and a retry at once sent the message again)."""
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = SlowWriter(kv)
    store = IdempotencyStore(kv, writer, window_s=60, now_ms=lambda: 1_000)  # type: ignore[arg-type]
    sends: list[str] = []

    async def first_compute() -> Answer:
        sends.append("first")
        return 200, {"status": "SENT", "id": "A"}

    async def again_compute() -> Answer:
        sends.append("repeat")
        return 200, {"status": "SENT", "id": "B"}

    first = asyncio.create_task(store.run("k", "fp", first_compute))
    await writer.entered.wait()  # sent; the answer's record is being synced (a slow disk)
    first.cancel()  # the client times out and disconnects...
    await asyncio.gather(first, return_exceptions=True)
    # ...and retries at once, as a client does after a timeout: the record is not written yet
    repeat = asyncio.create_task(store.run("k", "fp", again_compute))
    await asyncio.sleep(0.01)
    writer.release.set()
    answer = await asyncio.wait_for(repeat, 5)
    assert sends == ["first"], f"the message was sent twice under one Idempotency-Key: {sends}"
    assert answer == (200, {"status": "SENT", "id": "A"})
