"""Random gRPC calls at a running sidecar (Send, SendBatch, Publish, GetMessage, Cancel, GetTransaction)
with odd field values (extreme numbers, system and retry topics, 70 000-character strings, hundreds of
properties, bytes of any value): every call ends OK or with a client-error status, never INTERNAL or
UNKNOWN, and nothing is logged as an error. A group's retry topic was taken and then dead-lettered at
its first send until f2bd9b8 (exploratory runs: 8 000 calls clean after)."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from tests.app.conftest import logged_errors

CALLS = 500
SEED = 20261129
TEXTS = ["", "T", "a" * 300, "\u00e9", "%RETRY%x", "%DLQ%x", "T/x", "x" * 70_000, "2026-11-29T00:00:00Z",
         "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2026-13-40T99:99:99Z", " ", "\x00", "\n", "A" * 129,
         "TBW102", "SCHEDULE_TOPIC_XXXX", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
         "UNIQ_KEY", "DELAY", "content-type"]  # fmt: skip
NUMBERS = [
    0,
    -1,
    1,
    2**31,
    2**62,
    2**63 - 1,
    -(2**63),
    86_400_000 * 400,
    1_800_000_000_000,
    253_402_300_800_000,
]
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ALREADY_EXISTS}  # fmt: skip


def text(rnd: random.Random) -> str:
    if rnd.random() < 0.8:
        return rnd.choice(TEXTS)
    return "".join(chr(rnd.randrange(1, 0x3000)) for _ in range(rnd.randrange(20)))


def message(rnd: random.Random) -> pb.Message:
    m = pb.Message(topic=rnd.choice(["T", "T", text(rnd)]))
    payload = rnd.random()
    if payload < 0.4:
        m.body = text(rnd)
    elif payload < 0.8:
        m.body_bytes = bytes(rnd.randrange(256) for _ in range(rnd.randrange(50)))
    if rnd.random() < 0.3:
        m.tags = text(rnd)
    m.keys.extend(text(rnd) for _ in range(rnd.choice([0, 0, 1, 3, 40])))
    for _ in range(rnd.choice([0, 0, 1, 3, 200])):
        m.properties[text(rnd)] = text(rnd)
    if rnd.random() < 0.3:
        m.sharding_key = text(rnd)
    if rnd.random() < 0.2:
        m.type = text(rnd)
    when = rnd.random()
    if when < 0.2:
        m.delay_ms = rnd.choice(NUMBERS)
    elif when < 0.35:
        m.deliver_at_ms = rnd.choice(NUMBERS)
    elif when < 0.45:
        m.deliver_at = text(rnd)
    return m


async def one_call(stub: pb_grpc.SidecarStub, rnd: random.Random) -> None:
    kind, ack, key = rnd.randrange(6), rnd.choice([0, 1, 7]), rnd.choice(["", "", text(rnd)])
    if kind == 0:
        await stub.Send(pb.SendRequest(message=message(rnd), ack=ack, idempotency_key=key), timeout=20)
    elif kind == 1:
        messages = [message(rnd) for _ in range(rnd.choice([0, 1, 5, 50]))]
        await stub.SendBatch(pb.SendBatchRequest(messages=messages, ack=ack, idempotency_key=key), timeout=20)
    elif kind == 2:
        await stub.GetMessage(pb.GetMessageRequest(id=text(rnd)), timeout=20)
    elif kind == 3:
        await stub.Cancel(pb.CancelRequest(id=text(rnd)), timeout=20)
    elif kind == 4:
        requests = [pb.PublishRequest(sequence=rnd.choice([0, 1, 2**64 - 1]), message=message(rnd), ack=ack)
                    for _ in range(rnd.choice([1, 3]))]  # fmt: skip

        async def stream() -> AsyncIterator[pb.PublishRequest]:
            for request in requests:
                yield request

        async for _ in stub.Publish(stream(), timeout=20):
            pass
    else:
        await stub.GetTransaction(pb.TransactionRequest(id=text(rnd)), timeout=20)


async def test_random_calls_end_ok_or_refused_and_log_no_error(
    make_stack: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rnd = random.Random(SEED)
    outcomes: dict[str, int] = {}
    options = [("grpc.max_send_message_length", 128 * 2**20)]
    async with (
        make_stack() as stack,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}", options=options) as channel,
    ):
        stub = pb_grpc.SidecarStub(channel)
        for _ in range(CALLS):
            try:
                await one_call(stub, rnd)
                outcomes["OK"] = outcomes.get("OK", 0) + 1
            except grpc.aio.AioRpcError as exc:
                assert exc.code() in REFUSALS, (exc.code(), exc.details())
                outcomes[exc.code().name] = outcomes.get(exc.code().name, 0) + 1
            errors = logged_errors(caplog)
            assert not errors, errors[:3]
    assert outcomes.get("OK", 0) >= CALLS // 10 and outcomes.get("INVALID_ARGUMENT", 0) >= CALLS // 10, (
        outcomes
    )
