"""The gRPC edge against hostile input (issue 11, items 10 and 15): the documented 4 MiB body fits, a
malformed protobuf is INVALID_ARGUMENT, echoed input is bounded, the bearer scheme is case-insensitive."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from rocksidecar.app.api.grpc_edge import (
    ENVELOPE_BYTES,
    MALFORMED,
    Refused,
    Unread,
    WireBound,
    WireBounds,
    _tolerant,
)
from rocksidecar.app.api.parsing import VALUES_PER_MESSAGE
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.request import MAX_KEYS, MAX_PROPERTIES
from rocksidecar.app.sidecar import Ack
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


# Bounds read on the wire before decoding (app.api.grpc_edge.WireBounds) -------------------------------
LIMIT = 10  # the batch limit of these tests
BOUNDS = WireBounds(LIMIT)


def _varint(n: int, pad: int = 0) -> bytes:
    """``n`` as a varint, in ``pad`` more bytes than it needs (the decoder takes them)."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n and not pad:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)
        if not n:
            pad -= 1


def _field(number: int, value: bytes, pad: int = 0) -> bytes:
    return _varint((number << 3) | 2, pad) + _varint(len(value), pad) + value


def _deserializer(method: str, decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    bound = BOUNDS.for_method(method)
    parse = _tolerant(decode, bound)
    assert bound is not None and parse is not None
    return parse


BIG_BODY = _field(2, b"x" * 600_000)  # past where any of these methods' requests are read
UNKNOWN = (
    b"\x98\x01\x05" + b"\x9d\x01abcd" + b"\x99\x01abcdefgh" + b"\x9b\x01\x08\x01\x9c\x01"
)  # 19..: varint,
# fixed32, fixed64, a group: what the decoder skips


@pytest.mark.parametrize("pad", [0, 1, 2])  # tags and lengths in up to 5 bytes, as the decoder takes
@pytest.mark.parametrize("split", [False, True], ids=["one", "merged"])
@pytest.mark.parametrize(
    ("repeated", "most", "field"), [(5, MAX_KEYS, "keys"), (6, MAX_PROPERTIES, "properties")]
)
def test_a_message_s_keys_and_properties_are_counted_as_the_decoder_reads_them(
    pad: int, split: bool, repeated: int, most: int, field: str
) -> None:
    for n in (most, most + 1):
        # keys "k", or map entries of distinct names
        items = [
            _field(repeated, b"k" if repeated == 5 else _field(1, b"%d" % i) + _field(2, b"v"), pad)
            for i in range(n)
        ]
        # A request's message in two parts, as the decoder merges them, or in one; unknown fields between.
        halves = [items[: n // 2], items[n // 2 :]] if split else [items]
        raw = b"".join(_field(1, b"\x0a\x01T" + UNKNOWN + b"".join(part), pad) for part in halves) + BIG_BODY
        decoded = pb.SendRequest.FromString(raw)
        assert len(getattr(decoded.message, field)) == n
        got = _deserializer("Send", pb.SendRequest.FromString)(raw)
        if n > most:
            assert type(got) is Refused and got.error is not None and got.error.field == field
        else:
            assert type(got) is pb.SendRequest


def test_a_batch_s_messages_are_counted_and_a_refused_one_is_never_decoded() -> None:
    decoded: list[bytes] = []

    def decode(data: bytes) -> Any:
        decoded.append(data)
        return pb.SendBatchRequest.FromString(data)

    parse = _deserializer("SendBatch", decode)
    message = _field(1, b"x" * (600_000 // LIMIT))  # each a topic: together past where a batch is read
    assert type(parse(_field(1, message) * LIMIT)) is pb.SendBatchRequest
    over = parse(_field(1, message) * (LIMIT + 1))
    assert type(over) is Refused and over.error is not None
    assert (over.error.field, over.error.status) == ("messages", 413)
    huge = parse(b"\x0a\x00" * (4 * MiB))  # 4 Mi empty messages: 637 MiB once decoded
    assert type(huge) is Refused and huge.error is not None and huge.error.field == "messages"
    assert len(decoded) == 1  # the batch within the limit only
    # keys and properties in all: the HTTP route's bound on a batch's JSON values
    many = _field(1, b"".join(_field(5, b"k") for _ in range(LIMIT * VALUES_PER_MESSAGE + 1)))
    refused = parse(many + BIG_BODY)
    assert (
        type(refused) is Refused
        and refused.error is not None
        and "keys and properties" in refused.error.detail
    )


def test_a_request_too_short_to_hold_too_many_is_not_read() -> None:
    def check(data: bytes) -> object:
        raise AssertionError("read")

    parse = _tolerant(pb.SendRequest.FromString, WireBound(100, check))
    assert parse is not None and type(parse(_field(1, b"\x2a\x01k" * 30))) is pb.SendRequest


def test_corrupt_input_is_the_decoder_s_to_refuse_unless_counted_over_first() -> None:
    parse = _deserializer("SendBatch", pb.SendBatchRequest.FromString)
    assert parse(b"\x0a\x05ab" + b"\x0a\x00" * 400_000) is MALFORMED  # a length past its end: at once
    assert parse(b"\x0f" + b"\x0a\x00" * 400_000) is MALFORMED  # wire type 7
    after = parse(b"\x0a\x00" * 400_000 + b"\x0a\x05ab")  # the messages before it are counted first
    assert type(after) is Refused and after.error is not None and after.error.field == "messages"


@pytest.mark.parametrize(
    "filler",
    [b"\x0b", b"\x0c", b"\x18\x01", b"\x0a\x00"],
    ids=["group starts", "group ends", "varints", "merges"],
)
def test_reading_a_request_takes_a_bounded_number_of_steps(filler: bytes) -> None:
    # Millions of fields that build nothing would still be millions of steps to count: past what valid
    # messages have, the request is refused (then the decoder is spared them too).
    raw = filler * (6 * MiB // len(filler))
    got = _deserializer("Send", pb.SendRequest.FromString)(raw)
    assert type(got) is Refused and got.error is not None and got.error.field == "message"
    assert "fields besides keys and properties" in got.error.detail


def test_a_published_message_over_a_bound_is_answered_under_its_sequence() -> None:
    message = b"\x0a\x01T" + _field(5, b"k") * (MAX_KEYS + 1) + BIG_BODY
    raw = b"\x08\x05" + b"\x08" + _varint(2**64 - 1) + _field(2, message)  # the last sequence counts
    got = _deserializer("Publish", pb.PublishRequest.FromString)(raw)
    assert type(got) is Unread and (got.sequence, got.error.field) == (2**64 - 1, "keys")
    assert pb.PublishRequest.FromString(raw).sequence == 2**64 - 1


async def test_a_request_refused_on_the_wire_is_counted_under_the_status_it_is_answered(stack: Stack) -> None:
    """The request metric and the trailer agree: a batch of too many messages, refused before it is
    decoded, is a 413 in both (it was counted as a 400)."""
    limit = stack.service.settings.batch_limit
    message = _field(1, b"x" * (600_000 // limit + 1))  # each a topic: together past where a batch is read
    async with channel(stack) as ch:
        call = ch.unary_unary("/rocksidecar.v1.Sidecar/SendBatch")  # raw bytes in and out
        with pytest.raises(grpc.aio.AioRpcError) as over:
            await call(_field(1, message) * (limit + 1))
    assert dict(over.value.trailing_metadata() or ())["http-status"] == "413"
    registry = stack.service.metrics.registry

    def count(code: str) -> float:
        labels = {"api": "grpc", "route": "SendBatch", "code": code}
        return registry.get_sample_value("rocksidecar_requests_total", labels) or 0.0

    assert (count("413"), count("400")) == (1.0, 0.0)


def _requests_total(stack: Stack, method: str, code: str) -> float:
    labels = {"api": "grpc", "route": method, "code": code}
    return stack.service.metrics.registry.get_sample_value("rocksidecar_requests_total", labels) or 0.0


async def test_a_publish_stream_ended_by_a_malformed_message_is_counted_once(stack: Stack) -> None:
    """Review (session 29): one call, one count. It was counted twice: 200 by Publish when its request
    stream (cut at the bad message) ended, then 400 by the refusal that ends the call."""
    async with channel(stack) as ch:
        call = ch.stream_stream("/rocksidecar.v1.Sidecar/Publish")  # raw bytes in and out
        good = pb.PublishRequest(sequence=1, message=pb.Message(topic="PM", body="x")).SerializeToString()
        stream = call(iter([good, b"\xff\xff\xff\xff\x0f"]))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            async for _ in stream:
                pass
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    counted = {code: _requests_total(stack, "Publish", code) for code in ("200", "400")}
    assert counted == {"200": 0.0, "400": 1.0}
    assert len(stack.stored("PM")) == 1  # the message before it was sent and answered as usual


async def test_a_publish_stream_its_client_ended_is_counted_200(stack: Stack) -> None:
    async with channel(stack) as ch:
        call = ch.stream_stream("/rocksidecar.v1.Sidecar/Publish")
        good = pb.PublishRequest(sequence=1, message=pb.Message(topic="PM", body="x")).SerializeToString()
        assert len([a async for a in call(iter([good]))]) == 1
    assert _requests_total(stack, "Publish", "200") == 1.0


# A request carrying one message is bounded by what one message may take, before it is decoded ---------
SIZED = WireBounds(LIMIT, max_body_bytes=1024)
ONE_MESSAGE = 1024 + ENVELOPE_BYTES  # SIZED's bound on such a request


def _sized(method: str, decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    parse = _tolerant(decode, SIZED.for_method(method))
    assert parse is not None
    return parse


@pytest.mark.parametrize(
    ("method", "decode"),
    [("Send", pb.SendRequest.FromString), ("BeginTransaction", pb.BeginTransactionRequest.FromString)],
)
def test_a_unary_request_longer_than_one_message_may_be_is_refused_undecoded(
    method: str, decode: Callable[[bytes], Any]
) -> None:
    parse = _sized(method, decode)
    fits = _field(1, _field(3, b"\x01" * (ONE_MESSAGE - 16)))  # message.body_bytes: within the bound
    assert len(fits) <= ONE_MESSAGE and type(parse(fits)) is not Refused
    over = _field(1, _field(3, b"\x01" * ONE_MESSAGE))
    got = parse(over)
    assert type(got) is Refused and got.error is not None
    assert (got.error.status, got.error.field) == (413, "message")
    assert f"at most {ONE_MESSAGE} bytes" in got.error.detail


def test_a_published_message_longer_than_one_may_be_is_answered_under_its_sequence() -> None:
    parse = _sized("Publish", pb.PublishRequest.FromString)
    message = _field(3, b"\x01" * ONE_MESSAGE)
    for raw in (b"\x08\x07" + _field(2, message), _field(2, message) + b"\x08\x07"):  # either order
        got = parse(raw)
        assert type(got) is Unread and got.sequence == 7
        assert (got.error.status, got.error.field) == (413, "message")


def test_without_a_body_limit_a_request_is_not_bounded_by_its_length() -> None:
    raw = _field(1, _field(3, b"\x01" * (2 * MiB)))
    assert type(_deserializer("Send", pb.SendRequest.FromString)(raw)) is pb.SendRequest


async def test_a_published_message_larger_than_any_message_may_be_is_not_held_behind_the_batch_in_flight(
    make_stack: Any,
) -> None:
    """Review (session 29): grpc has one receive limit for every method, the batch bound (64 MiB by
    default), so a Publish message far past what any message may be was decoded and held with the
    stream's unanswered ones until the batch ahead returned (up to 256 of them a stream). It is refused
    on the wire instead, answered under its sequence while the batch is still out."""
    async with (
        make_stack(max_body_bytes=1024, max_request_bytes=4 * MiB) as stack,
        grpc.aio.insecure_channel(
            f"127.0.0.1:{stack.service.grpc.port}", options=[("grpc.max_send_message_length", 8 * MiB)]
        ) as ch,
    ):
        sidecar = stack.service.sidecar
        original = sidecar.send_batch
        started, release = asyncio.Event(), asyncio.Event()

        async def held(items: Any, ack: Any = Ack.BROKER) -> Any:
            started.set()
            await release.wait()  # a broker slow to answer (up to the send timeout)
            return await original(items, ack)

        sidecar.send_batch = held  # type: ignore[method-assign]
        call = pb_grpc.SidecarStub(ch).Publish()
        try:
            await call.write(pb.PublishRequest(sequence=0, message=pb.Message(topic="PB", body="ok")))
            await asyncio.wait_for(started.wait(), 10)
            huge = pb.Message(topic="PB", body_bytes=b"\x01" * (3 * MiB))  # past 1 KiB + 1 MiB
            await call.write(pb.PublishRequest(sequence=1, message=huge))
            try:
                ack = await asyncio.wait_for(call.read(), 10)  # a bound on the failure, not a wait
            except TimeoutError:
                pytest.fail("the 3 MiB message was held unanswered behind the batch in flight")
            assert ack.sequence == 1 and ack.error.http_status == 413, ack
            release.set()
            ack = await asyncio.wait_for(call.read(), 10)
            assert ack.sequence == 0 and ack.result.status == pb.SENT
        finally:
            release.set()
            call.cancel()


async def test_a_send_longer_than_one_message_may_be_is_refused_413(make_stack: Any) -> None:
    async with (
        make_stack(max_body_bytes=1024, max_request_bytes=4 * MiB) as stack,
        grpc.aio.insecure_channel(
            f"127.0.0.1:{stack.service.grpc.port}", options=[("grpc.max_send_message_length", 8 * MiB)]
        ) as ch,
    ):
        huge = pb.Message(topic="PB", body_bytes=b"\x01" * (3 * MiB))
        with pytest.raises(grpc.aio.AioRpcError) as over:
            await pb_grpc.SidecarStub(ch).Send(pb.SendRequest(message=huge))
        assert over.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        trailers = dict(over.value.trailing_metadata() or ())
        assert (trailers["http-status"], trailers["field"]) == ("413", "message")
        assert _requests_total(stack, "Send", "413") == 1.0
        assert not stack.stored("PB")
