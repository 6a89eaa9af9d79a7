"""The gRPC API against the HTTP API for the same request (from the session 31 review): each test sends
the same input over both and expects the same contract (outcome, refusal, metrics)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.request import MAX_KEYS
from tests.app.conftest import Stack


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[pb_grpc.SidecarStub]:
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{stack.service.grpc.port}", options=[("grpc.max_send_message_length", 64 << 20)]
    ) as ch:
        yield pb_grpc.SidecarStub(ch)


def rejected(stack: Stack) -> float:
    """rocksidecar_messages_total{outcome="rejected"}: bad input, counted by either API."""
    registry = stack.service.metrics.registry
    return registry.get_sample_value("rocksidecar_messages_total", {"outcome": "rejected"}) or 0.0


async def _refused(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value


def _with_field_20(message: pb.Message) -> pb.Message:
    """``message`` carrying field 20 (a string), which this proto does not define: kept as an unknown
    field by the decoder, as a client built on a newer .proto would send it."""
    carrying: pb.Message = pb.Message.FromString(message.SerializeToString() + b"\xa2\x01\x04high")
    return carrying


async def test_an_unknown_ack_is_counted_rejected_on_both_apis(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """HTTP's ?ack=other is a 400 counted as a rejected message; gRPC's ack=7 is INVALID_ARGUMENT, and
    should be counted the same (README: messages by outcome, rejected = bad input)."""
    before = rejected(stack)
    http = await stack.http.post("/v1/messages?ack=other", json={"topic": "UA", "body": "x"})
    assert http.status_code == 400 and http.json()["field"] == "ack"
    assert rejected(stack) == before + 1  # HTTP counts it

    message = pb.Message(topic="UA", body="x")
    for request in (
        pb.SendRequest(message=message, ack=7),  # type: ignore[arg-type]
        pb.SendRequest(message=message, ack=7, idempotency_key="ua-k"),  # type: ignore[arg-type]
    ):
        err = await _refused(stub.Send(request))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = await _refused(stub.SendBatch(pb.SendBatchRequest(messages=[message], ack=7)))  # type: ignore[arg-type]
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rejected(stack) == before + 1 + 3, "gRPC's refused ack modes were not counted as rejected"
    assert not stack.stored("UA")


async def test_an_empty_batch_is_counted_rejected_on_both_apis(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    before = rejected(stack)
    http = await stack.http.post("/v1/messages:batch", json={"messages": []})
    assert http.status_code == 400 and http.json()["field"] == "messages"
    assert rejected(stack) == before + 1  # HTTP counts it
    err = await _refused(stub.SendBatch(pb.SendBatchRequest()))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["field"] == "messages"
    assert rejected(stack) == before + 2, "gRPC's empty batch was not counted as rejected"


async def test_a_message_of_too_many_keys_is_counted_rejected_on_both_apis(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    keys = [f"k{i}" for i in range(MAX_KEYS + 10)]
    before = rejected(stack)
    http = await stack.http.post("/v1/messages", json={"topic": "TK", "body": "x", "keys": keys})
    assert http.status_code == 400 and http.json()["field"] == "keys"
    assert rejected(stack) == before + 1  # HTTP counts it
    err = await _refused(stub.Send(pb.SendRequest(message=pb.Message(topic="TK", body="x", keys=keys))))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["field"] == "keys"
    assert rejected(stack) == before + 2, "gRPC's message of too many keys was not counted as rejected"


async def test_a_malformed_request_is_counted_rejected_on_both_apis(stack: Stack) -> None:
    before = rejected(stack)
    http = await stack.http.post(
        "/v1/messages", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert http.status_code == 400
    assert rejected(stack) == before + 1  # HTTP counts it
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch:
        call = ch.unary_unary("/rocksidecar.v1.Sidecar/Send")  # raw bytes in and out
        err = await _refused(call(b"\xff\xff\xff\xff\x0f"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rejected(stack) == before + 2, "gRPC's malformed Send was not counted as rejected"


async def test_a_request_refused_for_its_ack_does_not_hold_its_idempotency_key(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """A keyed request refused for a bad ack, then sent again corrected under the same key: HTTP never
    kept the refusal (the ack is parsed before the key is looked at) and sends the corrected one; gRPC
    kept it (the ack is read inside the kept computation) and refuses the corrected request for 24 h as
    'used with a different request'."""
    msg = {"topic": "AK", "body": "x"}
    bad = await stack.http.post(
        "/v1/messages:batch?ack=later", json={"messages": [msg]}, headers={"Idempotency-Key": "ak-http"}
    )
    assert bad.status_code == 400 and bad.json()["field"] == "ack"
    good = await stack.http.post(
        "/v1/messages:batch?ack=broker", json={"messages": [msg]}, headers={"Idempotency-Key": "ak-http"}
    )
    assert good.status_code == 200 and good.json()["sent"] == 1  # HTTP: the corrected request is sent

    message = pb.Message(topic="AK", body="x")
    err = await _refused(
        stub.SendBatch(pb.SendBatchRequest(messages=[message], ack=7, idempotency_key="ak-grpc"))  # type: ignore[arg-type]
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["field"] == "ack"
    try:
        answer = await stub.SendBatch(
            pb.SendBatchRequest(messages=[message], ack=pb.ACK_BROKER, idempotency_key="ak-grpc")
        )
    except grpc.aio.AioRpcError as exc:
        pytest.fail(f"gRPC refused the corrected request: {exc.code()} {exc.details()}")
    assert answer.results[0].HasField("result")
    assert len(stack.stored("AK")) == 2


async def test_an_empty_batch_does_not_hold_its_idempotency_key(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """As above for a batch of no messages (the client's bug, fixed before its retry)."""
    empty = await stack.http.post(
        "/v1/messages:batch", json={"messages": []}, headers={"Idempotency-Key": "eb-http"}
    )
    assert empty.status_code == 400
    msg = {"topic": "EB", "body": "x"}
    good = await stack.http.post(
        "/v1/messages:batch", json={"messages": [msg]}, headers={"Idempotency-Key": "eb-http"}
    )
    assert good.status_code == 200 and good.json()["sent"] == 1

    await _refused(stub.SendBatch(pb.SendBatchRequest(idempotency_key="eb-grpc")))
    message = pb.Message(topic="EB", body="x")
    try:
        await stub.SendBatch(pb.SendBatchRequest(messages=[message], idempotency_key="eb-grpc"))
    except grpc.aio.AioRpcError as exc:
        pytest.fail(f"gRPC refused the corrected request: {exc.code()} {exc.details()}")
    assert len(stack.stored("EB")) == 2


async def test_a_message_field_the_api_does_not_know_is_refused_on_both_apis(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """HTTP refuses a field it does not know (400 'unknown field', nothing sent); gRPC sends the message
    without a word, dropping what the field asked for (a newer client's field, as the ack value 7 was
    before it was refused: test_grpc_api.test_an_ack_mode_the_proto_does_not_define_is_refused)."""
    http = await stack.http.post("/v1/messages", json={"topic": "UF", "body": "x", "priority": "high"})
    assert http.status_code == 400 and http.json()["field"] == "priority"

    # Message field 20 (a string), which this proto does not define: kept as an unknown field.
    message = pb.Message.FromString(
        pb.Message(topic="UF", body="x").SerializeToString() + b"\xa2\x01\x04high"
    )
    assert message.SerializeToString().endswith(b"\xa2\x01\x04high")  # carried on to the server
    try:
        answer = await stub.Send(pb.SendRequest(message=message))
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
    else:
        pytest.fail(f"gRPC sent a message with a field it does not know: {answer.status} {answer.id}")
    assert not stack.stored("UF")


async def test_a_batch_over_the_limit_is_counted_rejected_on_both_apis(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    n = stack.service.settings.batch_limit + 1
    before = rejected(stack)
    http = await stack.http.post("/v1/messages:batch", json={"messages": [{"topic": "BL", "body": "x"}] * n})
    assert http.status_code == 413 and http.json()["field"] == "messages"
    assert rejected(stack) == before + 1  # HTTP counts it
    err = await _refused(stub.SendBatch(pb.SendBatchRequest(messages=[pb.Message(topic="BL", body="x")] * n)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["http-status"] == "413"
    assert rejected(stack) == before + 2, "gRPC's batch over the limit was not counted as rejected"
    assert not stack.stored("BL")


async def test_an_unknown_field_of_the_request_or_its_message_is_named_counted_and_not_kept(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """The refusal names the field by its number, counts the message rejected once, and is not kept
    under the idempotency key: the request corrected is sent under the same key."""
    before = rejected(stack)
    message = _with_field_20(pb.Message(topic="UN", body="x"))
    err = await _refused(stub.Send(pb.SendRequest(message=message, idempotency_key="un-k")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "20" in (err.details() or "")
    assert dict(err.trailing_metadata() or ())["field"] == "message.20"
    # Field 9 of the request itself (SendRequest defines 1 to 3).
    request = pb.SendRequest.FromString(
        pb.SendRequest(message=pb.Message(topic="UN")).SerializeToString() + b"\x48\x01"
    )
    err = await _refused(stub.Send(request))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["field"] == "9"
    batch = pb.SendBatchRequest.FromString(
        pb.SendBatchRequest(messages=[pb.Message(topic="UN", body="x")]).SerializeToString() + b"\x48\x01"
    )
    err = await _refused(stub.SendBatch(batch))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.trailing_metadata() or ())["field"] == "9"
    assert rejected(stack) == before + 3
    assert not stack.stored("UN")

    answer = await stub.Send(pb.SendRequest(message=pb.Message(topic="UN", body="x"), idempotency_key="un-k"))
    assert answer.status == pb.SENT and len(stack.stored("UN")) == 1


async def test_a_batch_message_with_an_unknown_field_fails_alone_on_both_apis(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """HTTP's batch item with an unknown field fails only itself (the proto's contract for SendBatch
    too: a bad message fails only itself); the others are sent."""
    before = rejected(stack)
    http = await stack.http.post(
        "/v1/messages:batch",
        json={"messages": [{"topic": "UB", "body": "a", "priority": 1}, {"topic": "UB", "body": "b"}]},
    )
    assert http.status_code == 200 and http.json()["sent"] == 1
    assert rejected(stack) == before + 1

    messages = [_with_field_20(pb.Message(topic="UB", body="c")), pb.Message(topic="UB", body="d")]
    answer = await stub.SendBatch(pb.SendBatchRequest(messages=messages))
    first, second = answer.results
    assert first.HasField("error") and first.error.http_status == 400
    assert first.error.field == "messages[0].20"
    assert second.HasField("result") and second.result.status == pb.SENT
    assert rejected(stack) == before + 2
    assert sorted(m.body for m in stack.stored("UB")) == [b"b", b"d"]


async def test_a_published_message_with_an_unknown_field_is_refused_alone_and_counted(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    before = rejected(stack)

    async def requests() -> AsyncIterator[pb.PublishRequest]:
        yield pb.PublishRequest(sequence=1, message=_with_field_20(pb.Message(topic="UP", body="a")))
        yield pb.PublishRequest(sequence=2, message=pb.Message(topic="UP", body="b"))

    acks = {a.sequence: a async for a in stub.Publish(requests())}
    assert acks[1].HasField("error") and acks[1].error.http_status == 400
    assert acks[1].error.field == "message.20"
    assert acks[2].HasField("result") and acks[2].result.status == pb.SENT
    assert rejected(stack) == before + 1
    assert [m.body for m in stack.stored("UP")] == [b"b"]


async def test_a_malformed_published_message_is_counted_rejected(stack: Stack) -> None:
    """As a malformed Send: the stream ends with INVALID_ARGUMENT at the message, counted rejected."""
    before = rejected(stack)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as ch:
        call = ch.stream_stream("/rocksidecar.v1.Sidecar/Publish")  # raw bytes in and out
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in call(iter([b"\xff\xff\xff\xff\x0f"])):
                pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rejected(stack) == before + 1
