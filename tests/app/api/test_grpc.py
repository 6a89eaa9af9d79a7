"""The gRPC API: the HTTP API's operations, validation and statuses; streaming publish acknowledges each
message by sequence; errors carry the field; the generated code is current."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bench.common import REPO
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.devbroker.transactions import HALF_TOPIC
from tests.app.conftest import Stack


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[pb_grpc.SidecarStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        yield pb_grpc.SidecarStub(channel)


async def test_send_is_stored_under_the_answered_id(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    r = await stub.Send(
        pb.SendRequest(
            message=pb.Message(topic="G", body_bytes=b"\x00\xff", tags="T", keys=["k"], properties={"p": "v"})
        )
    )
    assert r.status == pb.SENT and r.broker.startswith("broker-")
    (stored,) = stack.stored("G")
    assert stored.uniq_key == r.id and stored.body == b"\x00\xff" and stored.user_properties == {"p": "v"}


async def test_ack_spool_and_status(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    await stack.stop_brokers()
    r = await stub.Send(pb.SendRequest(message=pb.Message(topic="GS", body="x")))
    assert r.status == pb.SPOOLED and r.last_error
    status = await stub.GetMessage(pb.GetMessageRequest(id=r.id))
    assert status.status == pb.SPOOLED and status.topic == "GS"
    await stack.start_brokers()
    await stack.drain()
    assert [m.uniq_key for m in stack.stored("GS")] == [r.id]


@pytest.mark.parametrize(
    ("message", "code", "field"),
    [
        (pb.Message(topic="bad topic", body="x"), grpc.StatusCode.INVALID_ARGUMENT, "topic"),
        (pb.Message(topic="T"), grpc.StatusCode.INVALID_ARGUMENT, "body"),
        (
            pb.Message(topic="T", body="x", properties={"TAGS": "x"}),
            grpc.StatusCode.INVALID_ARGUMENT,
            "properties.TAGS",
        ),
        (pb.Message(topic="T", body="x", delay_ms=-5), grpc.StatusCode.INVALID_ARGUMENT, "delay_ms"),
        (
            pb.Message(topic="T", body="x", deliver_at="tomorrow"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "deliver_at",
        ),
    ],
)
async def test_invalid_input_has_the_same_rules_as_http(
    stack: Stack, stub: pb_grpc.SidecarStub, message: Any, code: grpc.StatusCode, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Send(pb.SendRequest(message=message))
    assert info.value.code() == code
    assert dict(info.value.trailing_metadata() or ())["field"] == field
    assert not stack.stored("T") and stack.service.retry.stats().pending == 0


async def test_batch_reports_each_item(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    r = await stub.SendBatch(
        pb.SendBatchRequest(
            messages=[
                pb.Message(topic="GB", body="a"),
                pb.Message(topic="no way", body="b"),
                pb.Message(topic="GB", body="c"),
            ]
        )
    )
    assert [i.index for i in r.results] == [0, 1, 2]
    assert r.results[0].result.status == pb.SENT and r.results[2].result.status == pb.SENT
    assert r.results[1].error.http_status == 400 and r.results[1].error.field == "messages[1].topic"
    assert len(stack.stored("GB")) == 2


async def test_publish_stream_acknowledges_every_message(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i in range(200):
            topic = "GP" if i != 50 else "bad topic"
            yield pb.PublishRequest(sequence=i, message=pb.Message(topic=topic, body=f"m{i}"))

    acks = [ack async for ack in stub.Publish(requests())]
    assert sorted(a.sequence for a in acks) == list(range(200))
    bad = [a for a in acks if a.HasField("error")]
    assert [a.sequence for a in bad] == [50] and bad[0].error.field == "topic"
    assert {a.result.id for a in acks if a.HasField("result")} == {m.uniq_key for m in stack.stored("GP")}


async def test_idempotency_key(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    req = pb.SendRequest(message=pb.Message(topic="GI", body="x"), idempotency_key="g-1")
    first, again = await stub.Send(req), await stub.Send(req)
    assert first == again and len(stack.stored("GI")) == 1


async def test_concurrent_idempotency_key_with_different_bodies(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    for broker in stack.cluster.brokers.values():
        broker.faults.latency_s = 0.2  # the first request is still in flight when the others arrive

    async def send(i: int) -> pb.SendResponse | grpc.StatusCode:
        req = pb.SendRequest(message=pb.Message(topic="GD", body=f"conc-body-{i}"), idempotency_key="gd")
        try:
            return await stub.Send(req)
        except grpc.aio.AioRpcError as exc:
            return exc.code()

    answers = await asyncio.gather(*(send(i) for i in range(10)))
    sent = [(i, a) for i, a in enumerate(answers) if not isinstance(a, grpc.StatusCode)]
    assert [a for a in answers if isinstance(a, grpc.StatusCode)] == [grpc.StatusCode.INVALID_ARGUMENT] * 9
    [(i, ok)] = sent
    [stored] = stack.stored("GD")
    assert stored.uniq_key == ok.id and stored.body == f"conc-body-{i}".encode()


async def test_unknown_ids(stub: pb_grpc.SidecarStub) -> None:
    for call, request in (
        (stub.GetMessage, pb.GetMessageRequest(id="x")),
        (stub.Cancel, pb.CancelRequest(id="x")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(request)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_token_is_required_when_configured(make_stack: Any) -> None:
    async with (
        make_stack(auth_token="t0k") as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel,
    ):
        stub = pb_grpc.SidecarStub(channel)
        req = pb.SendRequest(message=pb.Message(topic="GA", body="x"))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Send(req)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = await stub.Send(req, metadata=(("authorization", "Bearer t0k"),))
        assert ok.status == pb.SENT and len(stack.stored("GA")) == 1


def test_generated_code_is_current(tmp_path: Path) -> None:
    proto = Path("rocksidecar/app/api/proto/rocksidecar.proto")  # as installed: rocksidecar.app.api.proto
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(REPO),
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(REPO / proto),
        ],
        check=True,
    )
    for name in ("rocksidecar_pb2.py", "rocksidecar_pb2_grpc.py", "rocksidecar_pb2.pyi"):
        fresh = (tmp_path / proto.parent / name).read_text()
        assert fresh == (REPO / proto.parent / name).read_text(), f"{name} is stale: run `make proto`"


async def test_delayed_send_status_and_cancel(stack: Stack, stub: pb_grpc.SidecarStub) -> None:
    r = await stub.Send(pb.SendRequest(message=pb.Message(topic="GD", body="x", delay_ms=60_000)))
    assert r.status == pb.SCHEDULED and r.deliver_at_ms > 0
    status = await stub.GetMessage(pb.GetMessageRequest(id=r.id))
    assert status.status == pb.SCHEDULED and status.deliver_at_ms == r.deliver_at_ms
    cancelled = await stub.Cancel(pb.CancelRequest(id=r.id))
    assert cancelled.status == pb.CANCELLED
    status = await stub.GetMessage(pb.GetMessageRequest(id=r.id))
    assert status.status == pb.CANCELLED and status.cancelled_at_ms > 0
    assert (status.topic, status.deliver_at_ms) == ("GD", r.deliver_at_ms)  # kept past the schedule
    assert not stack.stored("GD")


async def test_begin_transaction_refuses_an_unknown_field_before_its_key(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """As Send: a field this API does not define, in the request or its message, is refused naming it
    (not dropped), nothing is begun, and the refusal is not kept under the idempotency key."""
    message = pb.Message(topic="TU", body="x")
    in_message = pb.BeginTransactionRequest(
        message=pb.Message.FromString(message.SerializeToString() + b"\xa2\x01\x04high"),  # field 20
        idempotency_key="tu-k",
    )
    in_request = pb.BeginTransactionRequest.FromString(  # field 9 (the request defines 1 to 3)
        pb.BeginTransactionRequest(message=message, idempotency_key="tu-k").SerializeToString() + b"\x48\x01"
    )
    for request, field in ((in_message, "message.20"), (in_request, "9")):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.BeginTransaction(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
        assert dict(info.value.trailing_metadata() or ())["field"] == field
    transactions = stack.service.transactions
    assert transactions is not None and transactions.coordinator.records.all() == []
    assert not stack.stored(HALF_TOPIC)

    begun = await stub.BeginTransaction(pb.BeginTransactionRequest(message=message, idempotency_key="tu-k"))
    assert begun.state == pb.TX_PREPARED and len(stack.stored(HALF_TOPIC)) == 1
