"""The API's own descriptions of ack=broker (the proto's ACK_BROKER, OpenAPI's ack) against what it does."""

from __future__ import annotations

from pathlib import Path

from rocksidecar.app.api.http import _body_doc
from rocksidecar.app.api.schemas import MessageIn

ROOT = Path(__file__).resolve().parents[3]


def test_the_ack_broker_descriptions_do_not_say_it_spools_only_after_a_failed_send() -> None:
    """README "A sharding key's order across an outage": while a key has messages in the store, a message
    of that key sent now, ack=broker too, "is not sent to the broker ... it is spooled behind them and
    answered 202 SPOOLED" (tests/app/test_spooled_order.py proves it: no send attempt). The gRPC contract
    (the proto's ACK_BROKER) still says "spool durably only if every attempt fails", and OpenAPI's ack
    parameter "broker: send now, spool if that fails": a client reading either takes a 202 for ack=broker
    as a send that failed on every broker (an outage) and may alert or back off for nothing."""
    proto = (ROOT / "app/api/proto/rocksidecar.proto").read_text()
    ack_broker = next(line for line in proto.splitlines() if "ACK_BROKER" in line)
    ack_param = next(p for p in _body_doc(MessageIn)["parameters"] if p["name"] == "ack")
    stale = [
        text
        for text in (ack_broker, ack_param["description"])
        if ("only if every attempt fails" in text or "spool if that fails" in text) and "sharding" not in text
    ]
    assert stale == []
