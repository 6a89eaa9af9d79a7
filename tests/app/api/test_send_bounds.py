"""Hostile numbers and shapes on the send routes of both APIs (review of the send surface): each is a 4xx
naming the field (in a batch, that item only), never a 500, and a request is bounded before it is
parsed or decoded whole."""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from rocksidecar.app.api.parsing import parse_message
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.request import RequestError
from tests.app.conftest import Stack

MiB = 1024 * 1024
JSON = {"content-type": "application/json"}


@pytest.fixture
async def channel(stack: Stack) -> AsyncIterator[grpc.aio.Channel]:
    address = f"127.0.0.1:{stack.service.grpc.port}"
    async with grpc.aio.insecure_channel(address, options=[("grpc.max_send_message_length", 64 * MiB)]) as ch:
        yield ch


def _trailers(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {k: v for k, v in error.trailing_metadata() or () if isinstance(v, str)}


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | (0x80 if n else 0)])
        if not n:
            return out


# deliverAt ---------------------------------------------------------------------------------------
async def test_deliver_at_double_minus_is_a_400_naming_it(stack: Stack) -> None:
    r = await stack.http.post("/v1/messages", json={"topic": "DA", "body": "x", "deliverAt": "--5"})
    assert r.status_code == 400, (r.status_code, r.text)
    assert r.json()["field"] == "deliverAt"


async def test_deliver_at_double_minus_in_a_batch_fails_only_itself(stack: Stack) -> None:
    msgs = [{"topic": "DB", "body": "ok"}, {"topic": "DB", "body": "x", "deliverAt": "--5"}]
    r = await stack.http.post("/v1/messages:batch", json={"messages": msgs})
    assert r.status_code == 200, (r.status_code, r.text)
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["SENT", "REJECTED"]
    assert results[1]["error"]["field"] == "messages[1].deliverAt"


async def test_grpc_deliver_at_double_minus_is_invalid_argument(channel: grpc.aio.Channel) -> None:
    stub = pb_grpc.SidecarStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Send(pb.SendRequest(message=pb.Message(topic="DG", body="x", deliver_at="--5")))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (info.value.code(), info.value.details())
    assert _trailers(info.value)["field"] == "deliver_at"


# JSON bodies nested deep ----------------------------------------------------------------------------
def _deep(depth: int, topic: str) -> bytes:
    return b'{"topic":"%s","body":' % topic.encode() + b"[" * depth + b"]" * depth + b"}"


# json.dumps raised RecursionError from about 940 levels (a 500, and in a batch the whole batch's); the
# bound is 256 levels, and past some 950 the JSON parsers themselves give up (the request as a whole).
DEEPER = (*range(900, 1000, 7), 999, 5000)
TOO_DEEP_TO_PARSE = "nests too deeply to parse"


async def test_a_deeply_nested_json_body_is_a_400(stack: Stack) -> None:
    for depth in (257, 600, *DEEPER):
        r = await stack.http.post("/v1/messages", content=_deep(depth, "Deep"), headers=JSON)
        problem = r.json()
        assert r.status_code == 400, (depth, r.status_code, problem)
        if depth <= 600:
            assert (problem["field"], problem["detail"]) == ("body", "the body nests deeper than 256 levels")
        else:
            assert problem.get("field") == "body" or TOO_DEEP_TO_PARSE in problem["detail"], (depth, problem)
    r = await stack.http.post("/v1/messages", content=_deep(256, "Deep"), headers=JSON)
    assert r.status_code == 200, r.text


async def test_a_deeply_nested_json_body_in_a_batch_fails_only_itself(stack: Stack) -> None:
    for depth in (257, 600, *DEEPER):
        raw = b'{"messages":[{"topic":"DeepB","body":"ok"},' + _deep(depth, "DeepB") + b"]}"
        r = await stack.http.post("/v1/messages:batch", content=raw, headers=JSON)
        if depth > 600 and r.status_code == 400:  # past what the parsers take: refused whole, and said so
            assert TOO_DEEP_TO_PARSE in r.json()["detail"], (depth, r.json())
            continue
        assert depth < 5000, r.text[:200]  # 5 000 levels are always past them
        assert r.status_code == 200, (depth, r.status_code, r.text[:200])
        ok, deep = r.json()["results"]
        assert (ok["status"], deep["status"], deep["error"]["field"]) == (
            "SENT",
            "REJECTED",
            "messages[1].body",
        )


# retry topics ------------------------------------------------------------------------------------
async def test_a_plain_batch_to_a_retry_topic_is_rejected_as_a_single_send_is(stack: Stack) -> None:
    one = await stack.http.post("/v1/messages", json={"topic": "%RETRY%grp", "body": "x"})
    assert one.status_code == 400 and one.json()["field"] == "topic"
    for _ in range(6):  # six of these, refused by the brokers, once took every broker out of the selection
        r = await stack.http.post(
            "/v1/messages:batch",
            json={"messages": [{"topic": "T", "body": "a"}, {"topic": "%RETRY%grp", "body": "x"}]},
        )
        assert r.status_code == 200
        sent, retry = r.json()["results"]
        assert sent["status"] == "SENT"
        assert (retry["status"], retry["error"]["status"], retry["error"]["field"]) == (
            "REJECTED",
            400,
            "messages[1].topic",
        )
    ready = await stack.http.get("/readyz")
    assert ready.status_code == 200, ready.json()
    assert all(b["state"] == "available" for b in ready.json()["brokers"]), ready.json()


async def test_a_grpc_batch_and_stream_to_a_retry_topic_are_refused_per_message(
    channel: grpc.aio.Channel,
) -> None:
    stub = pb_grpc.SidecarStub(channel)
    batch = await stub.SendBatch(
        pb.SendBatchRequest(
            messages=[pb.Message(topic="T", body="a"), pb.Message(topic="%RETRY%g", body="b")]
        )
    )
    assert batch.results[0].result.status == pb.SENT
    assert (batch.results[1].error.http_status, batch.results[1].error.field) == (400, "messages[1].topic")
    requests = [pb.PublishRequest(sequence=7, message=pb.Message(topic="%RETRY%g", body="b"))]
    (ack,) = [a async for a in stub.Publish(iter(requests))]
    assert (ack.sequence, ack.error.http_status, ack.error.field) == (7, 400, "topic")


# counts bounded before parsing ---------------------------------------------------------------------
def test_a_message_with_millions_of_keys_is_refused_before_it_is_parsed() -> None:
    n = 1_660_000  # 6.6 MB, within the single route's limit: parsed, then refused, it took 96 MB and 1.3 s
    for raw, field in (
        (b'{"topic":"T","body":"x","keys":[' + b",".join([b'"a"'] * n) + b"]}", "keys"),
        (
            b'{"topic":"T","body":"x","properties":{'
            + b",".join(b'"%d":"v"' % i for i in range(n // 3))
            + b"}}",
            "properties",
        ),
    ):
        tracemalloc.start()
        try:
            with pytest.raises(RequestError) as refused:
                parse_message(raw)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (refused.value.status, refused.value.field) == (400, field)
        assert peak < 3 * len(raw), f"{peak / MiB:.0f} MiB for a {len(raw) / MiB:.1f} MiB body"


def test_a_json_body_of_many_values_is_not_refused_by_the_bound() -> None:
    raw = (
        b'{"topic":"T","body":[' + b",".join([b"0"] * 300_000) + b'],"keys":["a","b"],"properties":{"p":"v"}}'
    )
    spec = parse_message(raw)
    assert (len(spec.body or ()), spec.keys, spec.properties) == (300_000, ["a", "b"], {"p": "v"})


async def test_a_single_send_with_millions_of_keys_is_a_400_naming_keys(stack: Stack) -> None:
    raw = b'{"topic":"T","body":"x","keys":[' + b",".join([b'"a"'] * 1_660_000) + b"]}"
    r = await stack.http.post("/v1/messages", content=raw, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["field"]) == (400, "keys"), r.text[:300]


def _vm_mib(name: str) -> int:
    found = re.search(rf"^{name}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert found is not None
    return int(found.group(1)) // 1024


def _reset_peak_rss() -> int:
    """The process's resident MiB now, its peak (VmHWM) reset to it: ru_maxrss only ever grows, so what
    an earlier test peaked at would hide a call's growth."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pytest.skip("no /proc/self/clear_refs to reset the peak resident size")
    return _vm_mib("VmRSS")


async def _refused_growth(
    channel: grpc.aio.Channel, method: str, raw: bytes
) -> tuple[grpc.aio.AioRpcError, int]:
    call = channel.unary_unary(f"/rocksidecar.v1.Sidecar/{method}", request_serializer=lambda b: b)
    rss = _reset_peak_rss()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(raw)
    return info.value, _vm_mib("VmHWM") - rss


async def test_a_grpc_batch_of_millions_of_empty_messages_is_refused_before_decoding(
    channel: grpc.aio.Channel,
) -> None:
    raw = b"\x0a\x00" * (4 * MiB)  # 8 MiB: 4 Mi empty messages, under the 64 MiB receive limit
    error, grew = await _refused_growth(channel, "SendBatch", raw)
    # Decoded, then counted: the peak grew 500-637 MiB. The request's own copies (client, grpc) remain.
    assert grew < 64, f"peak RSS grew {grew} MiB for an 8 MiB request"
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert _trailers(error) == {"field": "messages", "http-status": "413"}


async def test_a_grpc_send_with_millions_of_keys_is_refused_before_decoding(
    channel: grpc.aio.Channel,
) -> None:
    inner = b"\x0a\x01T" + b"\x12\x01x" + b"\x2a\x01k" * (8 * MiB // 3)  # topic, body, 2.8 Mi keys "k"
    raw = b"\x0a" + _varint(len(inner)) + inner  # SendRequest.message
    error, grew = await _refused_growth(channel, "Send", raw)
    assert grew < 64, f"peak RSS grew {grew} MiB for an 8 MiB request"  # decoded: 217 MiB
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert _trailers(error) == {"field": "keys", "http-status": "400"}


async def test_a_streamed_message_over_the_bound_fails_alone_undecoded(channel: grpc.aio.Channel) -> None:
    def published(sequence: int, message: bytes) -> bytes:
        return b"\x08" + _varint(sequence) + b"\x12" + _varint(len(message)) + message

    plain = b"\x0a\x01T\x12\x01x"  # topic T, body x
    many = plain + b"\x32\x06\x0a\x01k\x12\x01v" * (2 * MiB)  # 2 Mi properties: 16 MiB, refused unread
    few = plain + b"\x2a\x01k" * 20_000  # 20 000 keys: decoded, refused as Send refuses them
    stream = channel.stream_stream(
        "/rocksidecar.v1.Sidecar/Publish",
        request_serializer=lambda b: b,
        response_deserializer=pb.PublishAck.FromString,
    )(iter([published(1, plain), published(2, many), published(3, few), published(4, plain)]))
    rss = _reset_peak_rss()
    acks = {ack.sequence: ack async for ack in stream}
    grew = _vm_mib("VmHWM") - rss
    assert [acks[i].result.status for i in (1, 4)] == [pb.SENT, pb.SENT]
    assert (acks[2].error.http_status, acks[2].error.field) == (400, "properties")
    assert (acks[3].error.http_status, acks[3].error.field) == (400, "keys")
    assert grew < 96, f"peak RSS grew {grew} MiB for a 16 MiB stream"


async def test_a_grpc_send_of_a_few_too_many_keys_is_refused_naming_them(channel: grpc.aio.Channel) -> None:
    stub = pb_grpc.SidecarStub(channel)
    for n in (16_256, 40_000):  # below where the wire is read (refused once decoded), and above
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Send(pb.SendRequest(message=pb.Message(topic="T", body="x", keys=["k"] * n)))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _trailers(info.value)["field"] == "keys", (n, info.value.details())
