"""The gRPC side of subscriptions: Subscribe streams deliveries of a StreamHub, Ack answers them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from ..request import RequestError
from ..subscriptions.stream import Answer, Delivery, StreamHub, UnknownDelivery
from ..tracing.context import TRACEPARENT_PROPERTY, of_properties
from .problems import clip
from .proto import rocksidecar_pb2 as pb

_ANSWERS = {pb.ACK_OK: Answer.OK, pb.ACK_LATER: Answer.LATER, pb.ACK_FAILED: Answer.FAILED}


def hub_for(hubs: Mapping[str, StreamHub], name: str) -> StreamHub:
    hub = hubs.get(name)
    if hub is None:
        known = ", ".join(sorted(hubs)) or "none"
        raise RequestError.not_found(
            f"no gRPC subscription {clip(name)} (endpoint: grpc); known: {known}", field="subscription"
        )
    return hub


def delivery_proto(d: Delivery) -> pb.Delivery:
    m = d.msg
    trace = of_properties(m.user_properties) if TRACEPARENT_PROPERTY in m.user_properties else None
    return pb.Delivery(
        delivery_id=d.delivery_id,
        id=m.msg_id,
        topic=m.topic,
        body=m.body,
        tags=m.tags or "",
        keys=list(m.keys),
        properties=m.user_properties,
        broker=d.mq.broker_name,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        reconsume_times=m.reconsume_times,
        born_timestamp_ms=m.born_timestamp_ms,
        traceparent=trace.traceparent if trace else "",
        tracestate=trace.tracestate or "" if trace else "",
    )


async def stream(hub: StreamHub) -> AsyncIterator[pb.Delivery]:
    """Deliveries until the client goes away; what it took and did not answer goes to other streams."""
    taken: list[Delivery] = []
    hub.streams += 1
    try:
        while True:
            d = await hub.next()
            # only what is still open on the hub is this stream's to hand back: answered, timed out or
            # cancelled deliveries go (kept, a stream that never acks held every one it was offered)
            taken = [t for t in taken if hub.owns(t.delivery_id)]
            taken.append(d)
            yield delivery_proto(d)
    finally:
        hub.streams -= 1
        hub.lost(taken)


def ack(hubs: Mapping[str, StreamHub], request: pb.AckRequest) -> None:
    answer = _ANSWERS.get(request.outcome)
    if answer is None:
        raise RequestError(f"unknown outcome {request.outcome}", field="outcome")
    if request.retry_after_ms < 0:
        raise RequestError("retry_after_ms must not be negative", field="retry_after_ms")
    for hub in hubs.values():
        if hub.owns(request.delivery_id):
            try:
                hub.ack(request.delivery_id, answer, request.retry_after_ms)
            except UnknownDelivery:
                break
            return
    raise RequestError.not_found(
        f"no open delivery {request.delivery_id[:80]!r} (already answered, or timed out and sent back)",
        field="delivery_id",
    )
