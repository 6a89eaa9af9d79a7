"""The grpc.health.v1 service's Watch streams end when the server stops (app.api.grpc_health), after
saying NOT_SERVING: grpcio-health-checking's stay open, each holding the stop for its whole grace."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rocksidecar.app.api.grpc_health import EndingHealth

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


async def test_a_health_watch_is_ended_when_the_sidecar_stops(make_stack: Any) -> None:
    """Review (session 29): grpc clients that check health on their own (a service config's
    healthCheckConfig) hold a Watch open on every connection. The stop turned it NOT_SERVING but left it
    open, holding GrpcServer.stop for the whole grace (here 60 s)."""
    async with (
        make_stack(shutdown_grace_s=60.0) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch,
    ):
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await asyncio.wait_for(watch.read(), 10)).status == SERVING
        stopping = asyncio.ensure_future(stack.service.grpc.stop())
        try:
            update = await asyncio.wait_for(watch.read(), 10)
            assert update.status == NOT_SERVING
            assert await asyncio.wait_for(watch.read(), 10) is grpc.aio.EOF  # then it ends
            assert await watch.code() == grpc.StatusCode.OK
            try:
                await asyncio.wait_for(asyncio.shield(stopping), 10)  # a bound on the failure, not a wait
            except TimeoutError:
                pytest.fail("the stop was still waiting for a health Watch 10 s in (grace: 60 s)")
        finally:
            watch.cancel()
            await stopping


class _Context:
    """What Watch uses of a call's context: its writes, recorded."""

    def __init__(self) -> None:
        self.written: list[int] = []
        self.wrote = asyncio.Event()

    async def write(self, response: health_pb2.HealthCheckResponse) -> None:
        self.written.append(response.status)
        self.wrote.set()


async def _watching(checker: EndingHealth, service: str) -> tuple[asyncio.Task[None], _Context]:
    context = _Context()
    watch = asyncio.ensure_future(checker.Watch(health_pb2.HealthCheckRequest(service=service), context))
    await asyncio.wait_for(context.wrote.wait(), 5)  # its first status
    context.wrote.clear()
    return watch, context


async def test_a_watch_follows_the_status_and_ends_after_its_last() -> None:
    checker = EndingHealth()
    await checker.set("svc", SERVING)
    watch, context = await _watching(checker, "svc")
    await checker.set("svc", NOT_SERVING)
    await asyncio.wait_for(context.wrote.wait(), 5)
    await checker.set("svc", SERVING)
    await checker.enter_graceful_shutdown()
    await asyncio.wait_for(watch, 5)
    # the SERVING set just before the stop may be passed over: a watch sends the latest status
    assert context.written[:2] == [SERVING, NOT_SERVING] and context.written[-1] == NOT_SERVING
    check = await checker.Check(health_pb2.HealthCheckRequest(service="svc"), None)
    assert check.status == NOT_SERVING  # the base servicer's answers agree


async def test_a_watch_of_a_service_not_known_ends_too() -> None:
    checker = EndingHealth()
    watch, context = await _watching(checker, "nobody")
    await checker.enter_graceful_shutdown()
    await asyncio.wait_for(watch, 5)
    assert context.written == [SERVICE_UNKNOWN]  # unchanged: not sent again


async def test_a_watch_begun_after_the_stop_says_not_serving_and_ends() -> None:
    checker = EndingHealth()
    await checker.enter_graceful_shutdown()
    await checker.set("", SERVING)  # ignored from then on, as the base servicer ignores it
    context = _Context()
    await asyncio.wait_for(checker.Watch(health_pb2.HealthCheckRequest(service=""), context), 5)
    assert context.written == [NOT_SERVING]
