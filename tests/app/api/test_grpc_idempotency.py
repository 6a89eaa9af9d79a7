"""gRPC calls with an idempotency_key (app.api.grpc's keyed path, app.idempotency): a client that gives up
(a deadline, a cancel: grpc.aio cancels the handler) does not make its retry send again, and a replayed
refusal is marked as a replayed answer is; the sends left running for callers that gave up stay bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.api.servers import MAX_STREAMS_PER_CONNECTION
from rocksidecar.app.idempotency import MAX_GONE_SENDS, IdempotencyStore
from tests.app.conftest import Stack


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[pb_grpc.SidecarStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        yield pb_grpc.SidecarStub(channel)


@contextlib.contextmanager
def run_ends(store: IdempotencyStore) -> Iterator[asyncio.Event]:
    """An event set when a call's IdempotencyStore.run ends (answered or cancelled): from there to the end
    of its handler no other step runs."""
    original_run = store.run
    over = asyncio.Event()

    async def run(*args: Any, **kw: Any) -> Any:
        try:
            return await original_run(*args, **kw)
        finally:
            over.set()

    store.run = run  # type: ignore[method-assign]
    try:
        yield over
    finally:
        store.run = original_run  # type: ignore[method-assign]


async def test_a_keyed_send_whose_client_gave_up_after_the_broker_stored_it_is_not_sent_again(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """A Send with an idempotency_key whose client gives up (its deadline passes, it cancels) after the
    broker stored the message but before the answer came back: the retry with the same key gets the
    stored message's id, it does not send it a second time (app.idempotency: "a client retrying after a
    timeout ... gets the same id back instead of a duplicate"). The send goes on in a task of its own
    when the handler is cancelled (review, session 29: it was cancelled with it, nothing was kept, and
    the retry sent again)."""
    producer = stack.service.sidecar.producer
    original_send = producer.send
    stored_by_broker, answer_gate = asyncio.Event(), asyncio.Event()
    calls = 0

    async def slow_answer(msg: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        result = await original_send(msg, **kw)  # the broker has it from here on
        if calls == 1:
            stored_by_broker.set()
            await answer_gate.wait()  # its answer is slow: the client gives up meanwhile
        return result

    producer.send = slow_answer  # type: ignore[method-assign]
    req = pb.SendRequest(message=pb.Message(topic="IdemLate", body="x"), idempotency_key="late-1")
    with run_ends(stack.service.idempotency) as first_over:
        first = stub.Send(req)
        await asyncio.wait_for(stored_by_broker.wait(), 10)
        first.cancel()  # what a deadline does: the server's handler is cancelled
        await asyncio.wait_for(first_over.wait(), 10)
    answer_gate.set()  # the broker's answer arrives after all: the send that outlived its call completes

    answer = await asyncio.wait_for(stub.Send(req), 10)
    stored = stack.stored("IdemLate")
    assert len(stored) == 1, f"the broker holds {len(stored)} copies of one keyed Send"
    assert answer.id == stored[0].uniq_key
    assert calls == 1


async def test_a_repeat_waiting_on_a_first_call_that_is_cancelled_gets_the_first_answer(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """A client cancels its Send (a deadline, a disconnect) while a repeat with the same idempotency key
    waits for its answer: the first's send goes on, and the repeat is answered with its id; it does not
    hang (the first caller's CancelledError reaching it left the call with no status) nor send again.
    (Until session 29 the repeat sent the message itself: the first's send was cancelled with its call.)"""
    sidecar = stack.service.sidecar
    gate, first_in_send = asyncio.Event(), asyncio.Event()
    original_send = sidecar.producer.send
    sends = 0

    async def held_send(msg: Any, **kw: Any) -> Any:
        nonlocal sends
        sends += 1
        if not first_in_send.is_set():  # the first request's send only: held until its client goes
            first_in_send.set()
            await gate.wait()
        return await original_send(msg, **kw)

    sidecar.producer.send = held_send  # type: ignore[method-assign]
    store = stack.service.idempotency
    original_run = store.run
    entered = 0
    second_waits = asyncio.Event()

    async def run(*args: Any, **kw: Any) -> Any:
        nonlocal entered
        entered += 1
        if entered == 2:
            second_waits.set()  # original_run reaches its wait on the first answer with no await before
        return await original_run(*args, **kw)

    store.run = run  # type: ignore[method-assign]
    req = pb.SendRequest(message=pb.Message(topic="IdemCancel", body="x"), idempotency_key="cancel-1")
    try:
        first = stub.Send(req)
        await first_in_send.wait()
        second = stub.Send(req)
        await second_waits.wait()
        first.cancel()
        gate.set()  # the first's send, not cancelled with its call, completes
        code: grpc.StatusCode | None = None
        answer: pb.SendResponse | None = None
        try:
            answer = await asyncio.wait_for(second, 10)
            code = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
        except TimeoutError:
            code = None
        assert code == grpc.StatusCode.OK, f"the repeat got {code} (None: no answer within 10 s)"
        stored = stack.stored("IdemCancel")
        assert [m.body for m in stored] == [b"x"] and sends == 1  # the first's send, not the repeat's
        assert answer is not None and answer.id == stored[0].uniq_key
    finally:
        gate.set()


async def test_a_replayed_refusal_is_marked_replayed(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    """README: a Send with an idempotency_key "answered from an earlier call carries the initial metadata
    idempotent-replayed: true", a kept refusal too (HTTP sets Idempotent-Replayed on a replayed problem):
    the client tells it apart from a fresh refusal of this call. (It was aborted before the marker.)"""
    req = pb.SendRequest(message=pb.Message(topic="RR", body="x", delay_ms=-1), idempotency_key="rr-1")
    metadata: list[dict[str, str]] = []
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Send(req)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(info.value.trailing_metadata() or ())["field"] == "delay_ms"
        metadata.append(dict(info.value.initial_metadata() or ()))
    # HTTP, for the same kind of refusal: the repeat is marked
    headers = {"Idempotency-Key": "rr-http", "content-type": "application/json"}
    doc = {"topic": "RR", "body": "x", "delayMs": -1}
    http = [await stack.http.post("/v1/messages", json=doc, headers=headers) for _ in range(2)]
    assert [r.status_code for r in http] == [400, 400]
    assert http[1].headers.get("idempotent-replayed") == "true"
    assert "idempotent-replayed" not in metadata[0]
    assert metadata[1].get("idempotent-replayed") == "true", metadata[1]  # where a replayed success has it


async def test_keyed_sends_whose_callers_gave_up_stay_bounded_by_one_connection_s_streams(
    stack: Stack,
) -> None:
    """A keyed Send whose client gives up (a deadline, a cancel) leaves its send running in a task of its
    own (app.idempotency). Found by a review (session 29): nothing bounded how many, as grpc frees the
    call's stream at once. One connection, whose concurrent calls the server caps at
    MAX_STREAMS_PER_CONNECTION, kept any number of sends and their bodies in flight: a client with a
    deadline shorter than a slow broker's answer piled them up at its request rate (before that change
    the handler's cancel ended its send, and the stream cap bounded them). Past MAX_GONE_SENDS, a gone
    caller's send is cancelled with it again."""
    producer = stack.service.sidecar.producer
    original_send = producer.send
    running = peak = 0
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(msg: Any, **kw: Any) -> Any:  # a broker slow to answer
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        entered.set()
        try:
            await release.wait()
        finally:
            running -= 1
        return await original_send(msg, **kw)

    producer.send = held  # type: ignore[method-assign]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
            stub = pb_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]
            for n in range(MAX_STREAMS_PER_CONNECTION + 10):
                entered.clear()
                with run_ends(stack.service.idempotency) as handler_over:
                    call = stub.Send(
                        pb.SendRequest(message=pb.Message(topic="Pile", body="x"), idempotency_key=f"p-{n}")
                    )
                    done = asyncio.ensure_future(call)
                    began = asyncio.ensure_future(entered.wait())
                    await asyncio.wait([done, began], timeout=10, return_when=asyncio.FIRST_COMPLETED)
                    began.cancel()
                    call.cancel()  # the client gives up
                    over = asyncio.ensure_future(handler_over.wait())
                    await asyncio.wait([done, over], timeout=10, return_when=asyncio.FIRST_COMPLETED)
                    over.cancel()
                    await asyncio.gather(done, return_exceptions=True)
        assert peak <= MAX_STREAMS_PER_CONNECTION, (
            f"{peak} sends held at once by one connection whose calls are capped at "
            f"{MAX_STREAMS_PER_CONNECTION} (their callers all gave up)"
        )
        assert peak == MAX_GONE_SENDS + 1  # those left running, and the one whose caller was there
    finally:
        release.set()
        producer.send = original_send  # type: ignore[method-assign]
        await stack.service.idempotency.close(grace_s=10.0)
