"""Multi-step writes cut by a SIGKILL, against the promises that a 2xx
is never lost and that an idempotent request answered once is answered the same after a restart.

A SIGKILL is modelled at the storage layer: the process's writes that had not reached the store when it
died are dropped (a writer that queues them, as the group-commit writer does behind a WAL sync in
progress), and the restart is a new instance over the same store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocksidecar.app.idempotency import COLUMN_FAMILIES, Answer, IdempotencyStore
from rocksidecar.storage.kv import Op
from rocksidecar.storage.memory import MemoryKV


class _QueuedWriter:
    """The group-commit writer seen from its callers while a WAL sync of an earlier batch is under way
    (or the loop has not yet run its task): ``write`` queues the ops and returns once they are applied and
    synced. ``crash`` drops what is queued, as a SIGKILL does (nothing of it reached the store)."""

    def __init__(self, kv: MemoryKV) -> None:
        self._kv = kv
        self.queued: list[tuple[Sequence[Op], asyncio.Future[None]]] = []
        self.entered = asyncio.Event()

    async def write(self, ops: Sequence[Op], *, lazy: bool = False) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queued.append((ops, done))
        self.entered.set()
        await done

    def crash(self) -> None:
        for _, done in self.queued:
            done.cancel()
        self.queued.clear()


async def test_a_repeat_answered_before_the_answer_is_kept_is_answered_otherwise_after_a_restart() -> None:
    """A keyed request is sent (200 SENT, id A); while its answer waits in the writer's queue to be kept,
    a concurrent repeat under the same key (a client's retry after a timeout, Spark's speculative attempt)
    is answered at once from the in-memory future: 200 SENT id A, Idempotent-Replayed. A SIGKILL before
    the keep reaches the store; after the restart the client retries with the same key once more.
    Expected: the kept answer (A), nothing sent again: the repeat was answered, so the key's answer was
    promised. Actual: nothing was kept, the request is computed afresh: sent a second time, answered with
    another id (B)."""
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = _QueuedWriter(kv)
    store = IdempotencyStore(kv, writer, window_s=3600, now_ms=lambda: 1_000)  # type: ignore[arg-type]
    sends: list[str] = []

    async def send() -> Answer:
        sends.append("sent")
        return 200, {"status": "SENT", "id": "AB"[len(sends) - 1]}

    first = asyncio.create_task(store.run("k", "fp", send))
    await writer.entered.wait()  # sent; its answer is queued to be kept
    repeat = asyncio.create_task(store.run("k", "fp", send))
    # Today the repeat is answered in its first step (the first's answer is known); were it to wait for
    # the keep instead, it would still wait when the bound runs out: either way the outcome is settled.
    await asyncio.wait({repeat}, timeout=1)
    answered = repeat.result() if repeat.done() else None
    assert answered in (None, (200, {"status": "SENT", "id": "A"}))

    writer.crash()  # SIGKILL: the queued keep never reached the store
    for task in (first, repeat):
        task.cancel()
    await asyncio.gather(first, repeat, return_exceptions=True)

    writer2 = _QueuedWriter(kv)
    restarted = IdempotencyStore(kv, writer2, window_s=3600, now_ms=lambda: 1_000)  # type: ignore[arg-type]
    after = asyncio.create_task(restarted.run("k", "fp", send))
    keeping = asyncio.create_task(writer2.entered.wait())  # set only when an answer was computed afresh
    await asyncio.wait({after, keeping}, return_when=asyncio.FIRST_COMPLETED, timeout=10)
    try:
        if answered is not None:  # a client holds an answer for this key: it must stand
            assert sends == ["sent"], f"an answered keyed request was sent again after the restart: {sends}"
            assert after.done() and after.result() == answered
    finally:
        writer2.crash()
        after.cancel()
        keeping.cancel()
        await asyncio.gather(after, keeping, return_exceptions=True)
