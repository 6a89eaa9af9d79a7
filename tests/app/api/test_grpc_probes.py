"""gRPC health and reflection with a token set (issue 27 item 7): they need it by default, as /readyz
does; ``probes_without_token`` opens them; the Sidecar service needs the token either way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc

TOKEN = "s3cret"
Metadata = tuple[tuple[str, str], ...]


async def _check(channel: grpc.aio.Channel, metadata: Metadata) -> grpc.StatusCode:
    try:
        r = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), metadata=metadata
        )
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    assert r.status == health_pb2.HealthCheckResponse.SERVING
    return grpc.StatusCode.OK


async def _reflect(channel: grpc.aio.Channel, metadata: Metadata) -> grpc.StatusCode:
    names: set[str] = set()
    call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=metadata
    )
    try:
        async for answer in call:
            names |= {s.name for s in answer.list_services_response.service}
    except grpc.aio.AioRpcError as exc:
        assert not names
        return exc.code()
    assert "rocksidecar.v1.Sidecar" in names
    return grpc.StatusCode.OK


async def _watch(channel: grpc.aio.Channel, metadata: Metadata) -> grpc.StatusCode:
    call = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=""), metadata=metadata
    )
    try:
        async for answer in call:
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            call.cancel()  # the first answer is enough; Watch streams for ever
            return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    raise AssertionError("Watch ended without an answer")


NO_TOKEN: Metadata = ()
LOWER: Metadata = (("authorization", f"bearer {TOKEN}"),)
WRONG: Metadata = (("authorization", "Bearer nope"),)


@pytest.mark.parametrize(
    ("without_token", "metadata", "expected"),
    [
        (False, NO_TOKEN, grpc.StatusCode.UNAUTHENTICATED),  # the default: as /readyz
        (False, WRONG, grpc.StatusCode.UNAUTHENTICATED),
        (False, LOWER, grpc.StatusCode.OK),
        (True, NO_TOKEN, grpc.StatusCode.OK),
    ],
)
async def test_health_and_reflection_are_guarded_as_readyz_is(
    make_stack: Callable[..., Any], without_token: bool, metadata: Metadata, expected: grpc.StatusCode
) -> None:
    async with make_stack(auth_token=TOKEN, probes_without_token=without_token) as stack:
        del stack.http.headers["authorization"]
        readyz = (await stack.http.get("/readyz", headers=dict(metadata))).status_code
        assert (readyz == 401) == (metadata != LOWER)  # /readyz: the token whatever the setting
        async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
            assert await _check(channel, metadata) == expected
            assert await _watch(channel, metadata) == expected
            assert await _reflect(channel, metadata) == expected


async def test_the_sidecar_service_needs_the_token_even_with_open_probes(
    make_stack: Callable[..., Any],
) -> None:
    async with (
        make_stack(auth_token=TOKEN, probes_without_token=True) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.SidecarStub(channel).Send(pb.SendRequest(message=pb.Message(topic="T", body="x")))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
