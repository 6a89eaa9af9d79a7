"""app.api.grpc_views: every field of a gRPC Message reaches the spec, and a field the message does not
set leaves the spec's default (proto3's absence, not its zero value); an outcome's answer has its fields."""

from __future__ import annotations

import pytest

from rocksidecar.app.api.grpc_views import publish_ack, send_response, spec_from_proto
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.request import MessageSpec
from rocksidecar.app.sidecar import Outcome, Status
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.result import SendResult, SendStatus


def _parsed(m: pb.Message) -> pb.Message:
    return pb.Message.FromString(m.SerializeToString())  # as grpc hands it to the servicer


def test_every_set_field_reaches_the_spec() -> None:
    m = pb.Message(
        topic="T",
        body_bytes=b"\x00\xff",
        tags="",  # set, though empty: kept as "" (validation decides)
        keys=["k1", "k2"],
        properties={"a": "1", "b": "2"},
        sharding_key="s",
        type="FIFO",
        delay_ms=0,
    )
    assert spec_from_proto(_parsed(m)) == MessageSpec(
        topic="T",
        body_bytes=b"\x00\xff",
        tags="",
        keys=["k1", "k2"],
        properties={"a": "1", "b": "2"},
        sharding_key="s",
        type="FIFO",
        delay_ms=0,
    )


def test_an_unset_field_keeps_the_default_and_defaults_are_not_shared() -> None:
    first = spec_from_proto(_parsed(pb.Message(topic="T", body="x")))
    assert first == MessageSpec(topic="T", body="x")
    assert first.tags is None and first.sharding_key is None and first.type is None
    assert first.delay_ms is None and first.deliver_at is None and first.body_bytes is None
    first.keys.append("mutated")
    first.properties["mutated"] = "1"
    second = spec_from_proto(_parsed(pb.Message(topic="T", body="x")))
    assert second.keys == [] and second.properties == {}


@pytest.mark.parametrize(
    ("message", "deliver_at"),
    [
        (pb.Message(topic="T", body="x", deliver_at_ms=1_700_000_000_000), 1_700_000_000_000),
        (pb.Message(topic="T", body="x", deliver_at="2026-11-27T08:00:00Z"), "2026-11-27T08:00:00Z"),
    ],
)
def test_deliver_at_from_either_field(message: pb.Message, deliver_at: int | str) -> None:
    spec = spec_from_proto(_parsed(message))
    assert spec.deliver_at == deliver_at and spec.delay_ms is None


_STORED = SendResult(SendStatus.SEND_OK, "U1", "OFF1", MessageQueue("T", "broker-b", 3), 42)


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (
            Outcome("U1", Status.SENT, _STORED),
            pb.SendResponse(
                id="U1", status=pb.SENT, broker="broker-b", queue_id=3, queue_offset=42, msg_id="OFF1"
            ),
        ),
        (
            Outcome("U2", Status.SPOOLED, next_attempt_at_ms=7, last_error="timeout"),
            pb.SendResponse(id="U2", status=pb.SPOOLED, next_attempt_at_ms=7, last_error="timeout"),
        ),
        (
            Outcome("U3", Status.SCHEDULED, deliver_at_ms=9),
            pb.SendResponse(id="U3", status=pb.SCHEDULED, deliver_at_ms=9),
        ),
    ],
)
def test_an_outcome_as_its_answer(outcome: Outcome, expected: pb.SendResponse) -> None:
    assert send_response(outcome) == expected
    ack = publish_ack(5, outcome)
    assert (
        ack.sequence == 5 and ack.HasField("result") and not ack.HasField("error") and ack.result == expected
    )
