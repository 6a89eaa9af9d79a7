"""The Sender seam (issue 12 item 5): the sidecar's operations run on any transport with the two calls of
rmq.Sender, so a RocketMQ 5 gRPC transport can stand beside the remoting Producer."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rocksidecar.app.request import Prepared, RequestError
from rocksidecar.app.sidecar import Sidecar, Status
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message, MessageQueue, RocketMQError, Sender, SendResult, SendStatus
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.errors import for_code


class OtherTransport:
    """Not a Producer: stores in memory, refuses the topics in ``refuse`` with ``code``."""

    def __init__(self, refuse: dict[str, int] | None = None) -> None:
        self.refuse = refuse or {}
        self.sent: list[Message] = []

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        if msg.topic in self.refuse:
            raise for_code(self.refuse[msg.topic], "refused by the other transport")
        self.sent.append(msg)
        mq = MessageQueue(msg.topic, "grpc-broker", 0)
        return SendResult(SendStatus.SEND_OK, msg.id or "", "offset-id", mq, len(self.sent) - 1)

    async def send_batch(
        self,
        messages: Sequence[Message],
        sharding_keys: Sequence[str | None] | None = None,
        *,
        validated: bool = False,
    ) -> list[SendResult | RocketMQError]:
        out: list[SendResult | RocketMQError] = []
        for m in messages:
            try:
                out.append(await self.send(m))
            except RocketMQError as exc:
                out.append(exc)
        return out


class Spool:
    def __init__(self) -> None:
        self.records: list[RetryRecord] = []

    async def spool(self, record: RetryRecord, due_ms: int | None = None) -> object:
        self.records.append(record)
        return None

    async def spool_many(self, records: Sequence[RetryRecord], due_ms: int | None = None) -> object:
        self.records.extend(records)
        return None


def _prepared(topic: str, id_: str) -> Prepared:
    return Prepared(Message(topic, b"x", id=id_), None, "default", None)


def _sidecar(transport: Sender, spool: Spool) -> Sidecar:
    return Sidecar(transport, spool, policy_for=lambda _t: RetryPolicy((1.0,), 3), now_ms=lambda: 1_000)


async def test_the_sidecar_sends_through_any_sender() -> None:
    transport, spool = OtherTransport({"Busy": ResponseCode.NO_PERMISSION}), Spool()
    sidecar = _sidecar(transport, spool)
    sent = await sidecar.send(_prepared("T", "id-1"))
    assert sent.stored_at is not None
    assert (sent.status, sent.stored_at.broker, [m.id for m in transport.sent]) == (
        Status.SENT,
        "grpc-broker",
        ["id-1"],
    )
    spooled = await sidecar.send(_prepared("Busy", "id-2"))  # the same failure rule on any transport
    assert spooled.status is Status.SPOOLED and "NO_PERMISSION" in (spooled.last_error or "")
    assert [r.id for r in spool.records] == ["id-2"]


async def test_a_final_error_of_any_sender_is_refused() -> None:
    sidecar = _sidecar(OtherTransport({"Odd": ResponseCode.MESSAGE_ILLEGAL}), Spool())
    with pytest.raises(RequestError) as info:
        await sidecar.send(_prepared("Odd", "id-3"))
    assert info.value.status == 422
