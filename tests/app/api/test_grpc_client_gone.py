"""A gRPC call whose client hangs up before its answer (a deadline, a cancel, a disconnect: grpc.aio cancels
its handler) is counted as code 499, as HTTP counts one (README, metrics)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from rocksidecar.app.api.grpc_publish import PublishStreams
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from tests.app.api.test_grpc_idempotency import run_ends
from tests.app.conftest import Stack


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[pb_grpc.SidecarStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        yield pb_grpc.SidecarStub(channel)


def _counted(stack: Stack, method: str) -> dict[str, float]:
    """rocksidecar_requests_total of the gRPC ``method`` by code, the codes counted at all."""
    return {
        s.labels["code"]: s.value
        for metric in stack.service.metrics.registry.collect()
        if metric.name == "rocksidecar_requests"
        for s in metric.samples
        if s.name.endswith("_total") and s.labels.get("api") == "grpc" and s.labels.get("route") == method
        if s.value
    }


async def test_a_send_whose_client_hangs_up_before_its_answer_is_counted_499(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """The hot Send (no idempotency_key): its CancelledError passed uncounted (review, session 29)."""
    producer = stack.service.sidecar.producer
    original_send = producer.send
    entered, gone = asyncio.Event(), asyncio.Event()

    async def held(msg: Any, **kw: Any) -> Any:
        entered.set()
        try:
            await asyncio.Event().wait()  # a broker that does not answer in time
        except asyncio.CancelledError:
            gone.set()  # the handler's task is cancelled: all of it unwinds in this same step
            raise
        return await original_send(msg, **kw)  # pragma: no cover

    producer.send = held  # type: ignore[method-assign]
    call = stub.Send(pb.SendRequest(message=pb.Message(topic="HU", body="x")))
    await asyncio.wait_for(entered.wait(), 10)
    call.cancel()
    await asyncio.wait_for(gone.wait(), 10)
    producer.send = original_send  # type: ignore[method-assign]
    assert _counted(stack, "Send") == {"499": 1.0}


async def test_a_keyed_send_whose_client_hangs_up_before_its_answer_is_counted_499(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """Through _answered (an idempotency_key): the handler is cancelled, counted 499; the send it started
    goes on (app.idempotency), and its answer, kept, does not count the call again."""
    producer = stack.service.sidecar.producer
    original_send = producer.send
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(msg: Any, **kw: Any) -> Any:
        entered.set()
        await release.wait()  # a broker slow to answer
        return await original_send(msg, **kw)

    producer.send = held  # type: ignore[method-assign]
    try:
        with run_ends(stack.service.idempotency) as handler_over:
            req = pb.SendRequest(message=pb.Message(topic="HK", body="x"), idempotency_key="hk-1")
            call = stub.Send(req)
            await asyncio.wait_for(entered.wait(), 10)
            call.cancel()
            await asyncio.wait_for(handler_over.wait(), 10)
        assert _counted(stack, "Send") == {"499": 1.0}
    finally:
        release.set()
        producer.send = original_send  # type: ignore[method-assign]


async def test_a_publish_stream_its_client_cancels_is_counted_499(
    stack: Stack, stub: pb_grpc.SidecarStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Publish call cancelled by its client mid-stream passed uncounted too (a stream its client ends
    is counted 200: test_grpc_edge)."""
    closed = asyncio.Event()
    real_open = PublishStreams.open

    @contextlib.contextmanager
    def watched(self: PublishStreams, publisher: Any) -> Iterator[None]:
        try:
            with real_open(self, publisher):
                yield
        finally:
            closed.set()  # the handler's except clause counts right after this, in the same step

    monkeypatch.setattr(PublishStreams, "open", watched)
    call = stub.Publish()
    await call.write(pb.PublishRequest(sequence=0, message=pb.Message(topic="HU", body="m0")))
    first = await asyncio.wait_for(call.read(), 10)
    assert first.result.status == pb.SENT
    call.cancel()
    await asyncio.wait_for(closed.wait(), 10)
    assert _counted(stack, "Publish") == {"499": 1.0}
