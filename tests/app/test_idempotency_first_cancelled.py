"""An Idempotency-Key first request whose caller is cancelled (its client gave up: a gRPC deadline or cancel,
an HTTP stop past its grace): its send goes on and its answer is kept, so that a repeat, waiting or later,
gets that answer and sends nothing, for up to MAX_GONE_SENDS such sends at once; the stop
(IdempotencyStore.close) ends what is left of them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from rocksidecar.app import idempotency
from rocksidecar.app.idempotency import COLUMN_FAMILIES, Answer, IdempotencyStore
from rocksidecar.app.request import RequestError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV


def _store() -> tuple[IdempotencyStore, GroupCommitWriter]:
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    return IdempotencyStore(kv, writer, window_s=60, now_ms=lambda: 1_000), writer


async def test_a_waiting_repeat_gets_the_answer_of_a_first_request_whose_caller_was_cancelled() -> None:
    """Until session 29 the first's compute was cancelled with its caller and the repeat computed its own
    answer (a message the broker may already have held went twice); now the compute runs on and the
    repeat gets its answer, never ending with the first caller's CancelledError."""
    store, writer = _store()
    started, answer_back = asyncio.Event(), asyncio.Event()
    computes: list[str] = []

    async def first_compute() -> Answer:
        computes.append("first")
        started.set()
        await answer_back.wait()  # a send on its way when the client goes away
        return 200, {"status": "SENT", "id": "A"}

    async def again_compute() -> Answer:
        computes.append("repeat")  # pragma: no cover - the assertion below says why it must not run
        return 202, {"status": "SPOOLED"}  # pragma: no cover

    first = asyncio.create_task(store.run("k", "fp", first_compute))
    await started.wait()
    waiting = asyncio.Event()

    async def repeat_call() -> Answer:
        waiting.set()  # run() reaches its wait on the first answer in this same step (no await before)
        return await store.run("k", "fp", again_compute)

    repeat = asyncio.create_task(repeat_call())
    await waiting.wait()
    first.cancel()  # the first caller disconnected (gRPC cancels its handler)
    await asyncio.gather(first, return_exceptions=True)
    assert first.cancelled() and not repeat.done()  # the repeat waits on: the send was not cancelled
    answer_back.set()
    assert await asyncio.wait_for(repeat, 10) == (200, {"status": "SENT", "id": "A"})
    assert computes == ["first"]
    # kept too: a later repeat finds it stored
    assert await store.run("k", "fp", again_compute) == (200, {"status": "SENT", "id": "A"})
    await store.close(grace_s=0)
    await writer.close()


async def test_a_first_compute_that_fails_keeps_nothing_and_fails_its_waiting_repeat_alike() -> None:
    """A compute that raises (not cancelled) is the rule as before: its error reaches the first caller and
    a repeat waiting on it; nothing is kept, and the next request computes afresh."""
    store, writer = _store()
    started, fail = asyncio.Event(), asyncio.Event()

    async def failing() -> Answer:
        started.set()
        await fail.wait()
        raise RequestError("broken", field=None, status=503)

    first = asyncio.create_task(store.run("k", "fp", failing))
    await started.wait()
    repeat = asyncio.create_task(store.run("k", "fp", failing))
    await asyncio.sleep(0)  # the repeat reaches its wait on the first answer (no await before it)
    fail.set()
    for call in (first, repeat):
        with pytest.raises(RequestError, match="broken"):
            await call

    async def fine() -> Answer:
        return 200, {"id": "B"}

    assert await store.run("k", "fp", fine) == (200, {"id": "B"})
    await store.close(grace_s=0)
    await writer.close()


async def test_the_stop_waits_for_a_send_its_caller_left_then_cancels_it() -> None:
    """IdempotencyStore.close: a send that outlived its caller is given the grace to finish and is kept;
    one still running after it is cancelled, so nothing runs on past the stop (what it sends with closes
    next). A caller still waiting on a cancelled send, and a request after the close, are answered 503."""
    store, writer = _store()
    release = asyncio.Event()
    finished: list[str] = []

    async def held(name: str) -> Answer:
        await release.wait()
        finished.append(name)
        return 200, {"id": name}

    left = asyncio.create_task(store.run("left", "fp", lambda: held("left")))
    await asyncio.sleep(0)
    left.cancel()  # its client gave up: the send runs on
    await asyncio.gather(left, return_exceptions=True)
    closing = asyncio.create_task(store.close(grace_s=60))
    await asyncio.sleep(0)
    assert not closing.done()  # waiting for the send within the grace
    release.set()
    await asyncio.wait_for(closing, 10)
    assert finished == ["left"]
    assert await store.run("left", "fp", lambda: held("again")) == (200, {"id": "left"})  # kept

    store, writer2 = _store()
    never, running, cancelled = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def stuck() -> Answer:
        running.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 200, {}  # pragma: no cover

    waiting = asyncio.create_task(store.run("stuck", "fp", stuck))
    await running.wait()
    await asyncio.wait_for(store.close(grace_s=0), 10)
    assert cancelled.is_set()  # nothing left running
    with pytest.raises(RequestError) as refused:
        await waiting  # its caller still there: answered, not left with a CancelledError of another's
    assert refused.value.status == 503
    with pytest.raises(RequestError) as after:
        await store.run("new", "fp", stuck)
    assert after.value.status == 503
    await writer.close()
    await writer2.close()


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
    await asyncio.sleep(0)
    assert not repeat.done()  # answered once the answer is kept (a SIGKILL before: sent again)
    writer.release.set()
    done, _ = await asyncio.wait({repeat}, timeout=5)
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


async def test_past_the_cap_a_gone_caller_s_send_is_cancelled_and_its_repeat_computes_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sends left running for callers that went away are bounded (MAX_GONE_SENDS; review, session 29:
    grpc frees a given-up call's stream, so nothing else bounded them). Within the cap a gone caller's
    send runs on; past it, it is cancelled with its caller, the rule before session 29: a repeat then
    computes its own answer. New requests are not refused for it, and a send whose answer is known
    (only keeping it) is never cancelled so."""
    monkeypatch.setattr(idempotency, "MAX_GONE_SENDS", 1)
    store, writer = _store()
    gates = {key: asyncio.Event() for key in ("a", "b", "c")}
    started = {key: asyncio.Event() for key in gates}
    ended: list[str] = []

    def compute(key: str) -> Callable[[], Awaitable[Answer]]:
        async def send() -> Answer:
            started[key].set()
            try:
                await gates[key].wait()
            except asyncio.CancelledError:
                ended.append(f"{key} cancelled")
                raise
            return 200, {"status": "SENT", "id": key.upper()}

        return send

    callers = {}
    for key in ("a", "b"):
        callers[key] = asyncio.create_task(store.run(key, "fp", compute(key)))
        await started[key].wait()
        callers[key].cancel()  # its client gave up
        await asyncio.gather(callers[key], return_exceptions=True)
    assert ended == ["b cancelled"]  # "a" runs on within the cap, "b" was past it
    # a new request is served all the same; the repeat of "b" computes afresh
    gates["c"].set()
    assert await store.run("c", "fp", compute("c")) == (200, {"status": "SENT", "id": "C"})
    gates["b"].set()
    assert await store.run("b", "fp", compute("b")) == (200, {"status": "SENT", "id": "B"})
    gates["a"].set()
    await store.close(grace_s=10)
    assert await store.run("a", "fp", compute("a")) == (200, {"status": "SENT", "id": "A"})  # kept
    await writer.close()
