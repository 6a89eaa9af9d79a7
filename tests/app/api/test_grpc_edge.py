"""The gRPC edge against hostile input (issue 11, items 10 and 15): the documented 4 MiB body fits, a
malformed protobuf is INVALID_ARGUMENT, echoed input is bounded, the bearer scheme is case-insensitive."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from tests.app.conftest import Stack

MiB = 1024 * 1024


def channel(stack: Stack) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        f"127.0.0.1:{stack.service.grpc.port}",
        options=[("grpc.max_send_message_length", 128 * MiB)],
    )


async def test_the_documented_4_mib_body_fits(stack: Stack) -> None:
    body = b"\x01" * (4 * MiB)  # max_body_bytes' default
    async with channel(stack) as ch:
        r = await pb_grpc.SidecarStub(ch).Send(
            pb.SendRequest(message=pb.Message(topic="Big", body_bytes=body, properties={"p": "v"}))
        )
        assert r.status == pb.SENT
        with pytest.raises(grpc.aio.AioRpcError) as over:
            await pb_grpc.SidecarStub(ch).Send(
                pb.SendRequest(message=pb.Message(topic="Big", body_bytes=body + b"\x01"))
            )
        assert over.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(over.value.trailing_metadata() or ())["http-status"] == "413"
    assert [len(m.body) for m in stack.stored("Big")] == [4 * MiB]


@pytest.mark.parametrize("method", ["Send", "SendBatch", "GetMessage", "Cancel"])
async def test_a_malformed_protobuf_is_invalid_argument(stack: Stack, method: str) -> None:
    async with channel(stack) as ch:
        call = ch.unary_unary(f"/rocksidecar.v1.Sidecar/{method}")  # raw bytes in and out
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call(b"\xff\xff\xff\xff\x0f")
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value
        assert "protobuf" in (exc.value.details() or "")
    assert not stack.stored("T")


async def test_a_malformed_protobuf_in_a_stream_is_invalid_argument(stack: Stack) -> None:
    async with channel(stack) as ch:
        call = ch.stream_stream("/rocksidecar.v1.Sidecar/Publish")
        good = pb.PublishRequest(sequence=1, message=pb.Message(topic="T", body="x")).SerializeToString()
        stream = call(iter([good, b"\xff\xff\xff\xff\x0f"]))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            async for _ in stream:
                pass
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value


async def test_a_huge_id_is_not_echoed_back(stack: Stack) -> None:
    huge = "x" * MiB
    async with channel(stack) as ch:
        stub = pb_grpc.SidecarStub(ch)
        for rpc, request in (
            (stub.GetMessage, pb.GetMessageRequest(id=huge)),
            (stub.Cancel, pb.CancelRequest(id=huge)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await rpc(request)
            assert exc.value.code() == grpc.StatusCode.NOT_FOUND
            assert len(exc.value.details() or "") < 400 and "xxxx" in (exc.value.details() or "")
    r = await stack.http.get(f"/v1/messages/{'y' * 4000}")
    assert r.status_code == 404 and len(r.text) < 600


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_the_grpc_bearer_scheme_is_case_insensitive(make_stack: Any, scheme: str) -> None:
    async with make_stack(auth_token="s3cret") as stack, channel(stack) as ch:
        stub = pb_grpc.SidecarStub(ch)
        ok = await stub.Send(
            pb.SendRequest(message=pb.Message(topic="T", body="x")),
            metadata=(("authorization", f"{scheme} s3cret"),),
        )
        assert ok.status == pb.SENT
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.Send(
                pb.SendRequest(message=pb.Message(topic="T", body="x")),
                metadata=(("authorization", f"{scheme} wrong"),),
            )
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert len(stack.stored("T")) == 1
