"""A consumed message's trace context reaches the app as the CloudEvents distributed-tracing extension:
``ce-traceparent``/``ce-tracestate`` on a push, ``traceparent``/``tracestate`` in a bulk entry's event
(and, over gRPC, the TRACE_CONTEXT/TRACE_STATE properties of the delivery)."""

from __future__ import annotations

import dataclasses
import json

from rocksidecar.app.subscriptions.cloudevents import headers_for, structured_event
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.factory import stored

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
MQ = MessageQueue("T", "broker-a", 3)


def message(**props: str) -> MessageExt:
    msg = stored(41, b"body", queue_id=3)
    return dataclasses.replace(msg, properties={**msg.properties, **props})


def test_a_push_carries_ce_traceparent_and_tracestate() -> None:
    msg = message(**{TRACEPARENT_PROPERTY: TP, TRACESTATE_PROPERTY: "a=b", "k": "v"})
    headers = headers_for(msg, MQ, "G")
    assert headers["ce-traceparent"] == TP and headers["ce-tracestate"] == "a=b"
    assert headers["ce-k"] == "v" and "ce-rocketmqproperties" not in headers  # not carried twice


def test_a_bulk_event_carries_traceparent() -> None:
    event = structured_event(message(**{TRACEPARENT_PROPERTY: TP}), MQ, "G")
    assert event["traceparent"] == TP and "tracestate" not in event


def test_without_a_valid_trace_context_there_is_no_traceparent() -> None:
    headers = headers_for(message(**{TRACEPARENT_PROPERTY: "junk", "traceparent": "spoof"}), MQ, "G")
    assert "ce-traceparent" not in headers
    assert json.loads(headers["ce-rocketmqproperties"]) == {
        TRACEPARENT_PROPERTY: "junk",
        "traceparent": "spoof",
    }
