"""gRPC details (issue 17 item 11, issue 11 item 5): errors speak gRPC's field names, huge numbers are
INVALID_ARGUMENT, the standard health and reflection services answer, a replayed answer says so."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from bench.common import REPO
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from tests.app.conftest import Stack


@pytest.fixture
async def channel(stack: Stack) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch:
        yield ch


@pytest.mark.parametrize(
    ("message", "field", "http_name"),
    [
        (pb.Message(topic="T", body="x", delay_ms=-5), "delay_ms", "delayMs"),
        (pb.Message(topic="T", body="x", deliver_at_ms=-(2**62)), "deliver_at", "deliverAt"),
        (pb.Message(topic="T", body="x", sharding_key=""), "sharding_key", "shardingKey"),
        (pb.Message(topic="T", body="x", deliver_at="9" * 5000), "deliver_at", "deliverAt"),
        (pb.Message(topic="T", body="x", deliver_at_ms=2**62), "deliver_at", "deliverAt"),
        # audit (session 13): a sharding key travels as DMQ_SHARDING_KEY in service mode
        (pb.Message(topic="T", body="x", sharding_key="k" * 1025), "sharding_key", "shardingKey"),
        (pb.Message(topic="T", body="x", sharding_key="a\x01b"), "sharding_key", "shardingKey"),
        (pb.Message(topic="T", body="x", sharding_key="a\x02b"), "sharding_key", "shardingKey"),
    ],
)
async def test_errors_use_grpc_field_names(
    stack: Stack, channel: grpc.aio.Channel, message: pb.Message, field: str, http_name: str
) -> None:
    stub = pb_grpc.SidecarStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Send(pb.SendRequest(message=message))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert dict(info.value.trailing_metadata() or ())["field"] == field
    assert http_name not in (info.value.details() or "")
    batch = await stub.SendBatch(pb.SendBatchRequest(messages=[pb.Message(topic="T", body="ok"), message]))
    ok, bad = batch.results
    assert ok.HasField("result") and bad.error.field == f"messages[1].{field}"
    assert http_name not in bad.error.detail
    assert [m.body for m in stack.stored("T")] == [b"ok"]


async def test_health_service_and_reflection(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "rocksidecar.v1.Sidecar"):
        r = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert r.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    names: set[str] = set()
    async for answer in refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    ):
        names |= {s.name for s in answer.list_services_response.service}
    assert {"rocksidecar.v1.Sidecar", "grpc.health.v1.Health"} <= names


async def test_a_replayed_answer_is_marked_and_map_order_does_not_matter(
    stack: Stack, channel: grpc.aio.Channel
) -> None:
    stub = pb_grpc.SidecarStub(channel)
    first_msg = pb.Message(topic="GI", body="x")
    first_msg.properties["a"] = "1"
    first_msg.properties["b"] = "2"
    again_msg = pb.Message(topic="GI", body="x")
    again_msg.properties["b"] = "2"
    again_msg.properties["a"] = "1"
    call = stub.Send(pb.SendRequest(message=first_msg, idempotency_key="g-9"))
    first = await call
    assert ("idempotent-replayed", "true") not in tuple(await call.initial_metadata() or ())
    call = stub.Send(pb.SendRequest(message=again_msg, idempotency_key="g-9"))
    again = await call
    assert first.id == again.id and len(stack.stored("GI")) == 1
    assert ("idempotent-replayed", "true") in tuple(await call.initial_metadata() or ())


async def test_the_readme_python_example_runs(stack: Stack) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## gRPC API") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    code = code[: code.index("```")].replace("127.0.0.1:9881", f"127.0.0.1:{stack.service.grpc.port}")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    sent, invalid = out.decode().splitlines()
    [stored] = stack.stored("Orders")
    assert sent == f"SENT {stored.uniq_key}" and stored.body == b"order 1 placed"
    assert invalid == "INVALID_ARGUMENT delay_ms"


async def test_batch_size_bounds(make_stack: Any) -> None:
    async with (
        make_stack(batch_limit=2) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch,
    ):
        stub = pb_grpc.SidecarStub(ch)
        for n, http_status in ((0, "400"), (3, "413")):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.SendBatch(pb.SendBatchRequest(messages=[pb.Message(topic="T", body="x")] * n))
            meta = dict(info.value.trailing_metadata() or ())
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (meta["field"], meta["http-status"]) == ("messages", http_status)
            assert f"not {n}" in (info.value.details() or "")
        assert not stack.stored("T")


async def test_both_apis_bound_the_idempotency_key_alike(stack: Stack, channel: grpc.aio.Channel) -> None:
    msg = {"topic": "IdemLen", "body": "x"}
    stub = pb_grpc.SidecarStub(channel)
    for length, ok in ((255, True), (256, False)):
        http = await stack.http.post("/v1/messages", json=msg, headers={"Idempotency-Key": "k" * length})
        call = stub.Send(
            pb.SendRequest(message=pb.Message(topic="IdemLen", body="x"), idempotency_key="g" * length)
        )
        if ok:
            assert http.status_code == 200 and (await call).status == pb.Status.SENT
            continue
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert http.status_code == 400 and info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # the same rule and words, each API naming the field its own way
        assert info.value.details() == http.json()["detail"].replace("Idempotency-Key", "idempotency_key")


async def test_an_unknown_subscription_is_named_clipped(channel: grpc.aio.Channel) -> None:
    """Audit (session 13): a megabyte-long unknown subscription name came back whole in the status
    message, over the client's metadata limit (it saw RESOURCE_EXHAUSTED instead of NOT_FOUND)."""
    name = "n" * (1 << 20)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await pb_grpc.SidecarStub(channel).Subscribe(pb.SubscribeRequest(subscription=name)).read()
    assert info.value.code() == grpc.StatusCode.NOT_FOUND, info.value.details()
    details = info.value.details() or ""
    assert f"({len(name)} characters)" in details and len(details) < 200
    assert dict(info.value.trailing_metadata() or ())["field"] == "subscription"


@pytest.mark.parametrize(
    ("name", "value", "field"),
    [
        ("a\x01", "v", "properties.a\\x01"),  # a separator in the name
        ("ключ", "", "properties.\\u043a\\u043b\\u044e\\u0447"),  # an empty value under a non-ASCII name
        ("p" * 100_000 + "\x01", "v", "properties." + "p" * 245),  # a huge name
    ],
)
async def test_a_field_that_names_hostile_input_still_ends_the_call_invalid_argument(
    stack: Stack, channel: grpc.aio.Channel, name: str, value: str, field: str
) -> None:
    """Audit (session 13): the trailing metadata ``field`` echoed a property's name as it came, and a
    metadata value must be printable ASCII: grpc refused the whole status (INTERNAL 'Invalid metadata'),
    or the client its size (RESOURCE_EXHAUSTED). Now the name is escaped and both it and the message are
    cut short; the batch item's error (in the message, not metadata) still names the property as it is."""
    message = pb.Message(topic="HF", body="x", properties={name: value})
    stub = pb_grpc.SidecarStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Send(pb.SendRequest(message=message))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    meta = dict(info.value.trailing_metadata() or ())
    assert (meta["field"], meta["http-status"]) == (field, "400")
    assert len(info.value.details() or "") < 600
    [item] = (await stub.SendBatch(pb.SendBatchRequest(messages=[message]))).results
    assert item.error.field == f"messages[0].properties.{name}"
    assert not stack.stored("HF")


async def test_an_ack_mode_the_proto_does_not_define_is_refused(
    stack: Stack, channel: grpc.aio.Channel
) -> None:
    """Audit (session 13): proto3 keeps an unknown enum value, and an ack of 7 (a newer client's mode,
    say) was sent as ACK_BROKER without a word; HTTP refuses ?ack=other with 400. Now INVALID_ARGUMENT
    naming ``ack``, and on a Publish stream that message's acknowledgement is the error."""
    stub = pb_grpc.SidecarStub(channel)
    message = pb.Message(topic="UA", body="x")
    for call in (
        stub.Send(pb.SendRequest(message=message, ack=7)),  # type: ignore[arg-type]
        stub.Send(pb.SendRequest(message=message, ack=-1, idempotency_key="ua-1")),  # type: ignore[arg-type]
        stub.SendBatch(pb.SendBatchRequest(messages=[message], ack=2)),  # type: ignore[arg-type]
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
        assert dict(info.value.trailing_metadata() or ())["field"] == "ack"

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        for i, ack in enumerate((pb.ACK_BROKER, 5, pb.ACK_SPOOL, 5)):
            yield pb.PublishRequest(sequence=i, ack=ack, message=message)  # type: ignore[arg-type]

    acks = {a.sequence: a for a in [a async for a in stub.Publish(requests())]}
    assert sorted(acks) == [0, 1, 2, 3]
    assert [acks[i].error.field for i in (1, 3)] == ["ack", "ack"]
    assert acks[0].result.status == pb.SENT and acks[2].result.status == pb.SPOOLED
    await stack.drain()
    assert {m.uniq_key for m in stack.stored("UA")} == {acks[0].result.id, acks[2].result.id}


async def test_a_batch_over_the_limit_is_refused_before_its_messages_are_read(
    make_stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit (session 13): SendBatch read every message of the request into a spec before counting them:
    a 64 MiB request of 13 million empty messages held the event loop about a minute (spec_from_proto
    takes ~4.6 us a message here) before INVALID_ARGUMENT. Now the count is checked first."""
    from rocksidecar.app.api import grpc as grpc_api

    read: list[pb.Message] = []

    def counting(m: pb.Message) -> Any:
        read.append(m)
        return spec_from_proto(m)

    spec_from_proto = grpc_api.spec_from_proto
    monkeypatch.setattr(grpc_api, "spec_from_proto", counting)
    async with (
        make_stack(batch_limit=2) as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.SidecarStub(ch).SendBatch(
                pb.SendBatchRequest(messages=[pb.Message(topic="T", body="x")] * 1000)
            )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # counted on the wire, before it is decoded (app.api.grpc_edge): at the third message
        assert "1 to 2 messages; this one more" in (info.value.details() or "") and not read
