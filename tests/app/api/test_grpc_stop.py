"""GrpcServer.stop (app.api.servers) stops accepting on the streams too (README: SIGTERM means "stop
accepting, finish in-flight work"): an open Publish stream is read no more, what it read is answered,
and it ends UNAVAILABLE (app.api.grpc_publish.PublishStreams)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from rocksidecar.app.api.grpc_publish import PublishStreams
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.sidecar import Ack
from tests.app.conftest import Stack


def _requests_total(stack: Stack, code: str) -> float:
    labels = {"api": "grpc", "route": "Publish", "code": code}
    return stack.service.metrics.registry.get_sample_value("rocksidecar_requests_total", labels) or 0.0


async def test_an_open_publish_stream_is_ended_when_the_sidecar_stops(make_stack: Any) -> None:
    """Review (session 29): a Publish stream left open (the usual long-lived publisher) was neither ended
    nor kept from sending: the stop gave it the whole grace (20 s by default, here 60 s), accepting and
    storing what it sent meanwhile, and then cancelled it."""
    async with (
        make_stack(shutdown_grace_s=60.0) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch,
    ):
        call = pb_grpc.SidecarStub(ch).Publish()
        await call.write(pb.PublishRequest(sequence=0, message=pb.Message(topic="PS", body="m0")))
        first = await asyncio.wait_for(call.read(), 10)
        assert first.sequence == 0 and first.result.status == pb.SENT
        stopping = asyncio.ensure_future(stack.service.grpc.stop())
        try:
            try:
                await asyncio.wait_for(call.read(), 10)  # a bound on the failure, not a wait
            except TimeoutError:
                pytest.fail("the Publish stream was still open 10 s into the stop (grace: 60 s)")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                assert dict(exc.trailing_metadata() or ())["http-status"] == "503"
            else:
                pytest.fail("the stream ended OK: its client would take it as done")
            await asyncio.wait_for(asyncio.shield(stopping), 10)
        finally:
            call.cancel()
            await stopping
        assert (_requests_total(stack, "503"), _requests_total(stack, "200")) == (1.0, 0.0)


async def test_what_a_stopped_stream_read_is_answered_and_what_came_after_is_not_taken(
    make_stack: Any,
) -> None:
    async with (
        make_stack(shutdown_grace_s=60.0) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch,
    ):
        sidecar = stack.service.sidecar
        original = sidecar.send_batch
        started, release = asyncio.Event(), asyncio.Event()

        async def held(items: Any, ack: Any = Ack.BROKER) -> Any:
            started.set()
            await release.wait()  # in flight when the stop begins
            return await original(items, ack)

        sidecar.send_batch = held  # type: ignore[method-assign]
        streams = stack.service.grpc._streams
        assert isinstance(streams, PublishStreams)
        stop_streams, streams_stopped = streams.stop, asyncio.Event()

        def stop() -> None:
            stop_streams()
            streams_stopped.set()

        streams.stop = stop  # type: ignore[method-assign]
        call = pb_grpc.SidecarStub(ch).Publish()
        await call.write(pb.PublishRequest(sequence=0, message=pb.Message(topic="PS", body="m0")))
        await asyncio.wait_for(started.wait(), 10)
        stopping = asyncio.ensure_future(stack.service.grpc.stop())
        try:
            await asyncio.wait_for(streams_stopped.wait(), 10)
            # sent after the stop began: never read, so never stored (the client sends it again)
            await call.write(pb.PublishRequest(sequence=1, message=pb.Message(topic="PS", body="m1")))
            release.set()
            ack = await asyncio.wait_for(call.read(), 10)
            assert ack.sequence == 0 and ack.result.status == pb.SENT  # in flight at the stop: answered
            with pytest.raises(grpc.aio.AioRpcError) as end:
                await asyncio.wait_for(call.read(), 10)
            assert end.value.code() == grpc.StatusCode.UNAVAILABLE
            await asyncio.wait_for(asyncio.shield(stopping), 10)
        finally:
            release.set()
            call.cancel()
            await stopping
        assert [m.body for m in stack.stored("PS")] == [b"m0"]
