"""A repeat waiting on an Idempotency-Key's first request is answered when that first call is cancelled
(it hung: the first caller's CancelledError reached it, and grpc.aio sends no status for that)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from tests.app.conftest import Stack


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[pb_grpc.SidecarStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        yield pb_grpc.SidecarStub(channel)


async def test_grpc_idempotent_repeat_gets_an_answer_when_the_first_call_is_cancelled(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """A client cancels its Send (a deadline, a disconnect) while a repeat with the same idempotency key
    waits for its answer: the repeat sends the message itself and is answered, it does not hang."""
    sidecar = stack.service.sidecar
    gate, first_in_send = asyncio.Event(), asyncio.Event()
    original_send = sidecar.producer.send

    async def held_send(msg: Any, **kw: Any) -> Any:
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
        code: grpc.StatusCode | None = None
        try:
            await asyncio.wait_for(second, 10)
            code = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
        except TimeoutError:
            code = None
        assert code == grpc.StatusCode.OK, f"the repeat got {code} (None: no answer within 10 s)"
        assert [m.body for m in stack.stored("IdemCancel")] == [b"x"]  # the repeat's own send
    finally:
        gate.set()
