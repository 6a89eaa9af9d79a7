"""Domain values as the gRPC API's messages, and its requests as domain values: one explicit mapping
per message, field by field (protobuf's snake_case names; absent values are proto3's zero defaults)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message as ProtoMessage
from google.protobuf.unknown_fields import UnknownFieldSet

from rocksidecar.storage.status import StoredAtLike

from ..request import MessageSpec, RequestError
from ..sidecar import Ack, MessageState, Outcome, Status
from . import problems
from .operations import BatchItem
from .proto import rocksidecar_pb2 as pb

# By identity, member by member: a state without its gRPC twin fails at import, not at an answer.
PB_STATUS: dict[Status, pb.Status] = {
    Status.SENT: pb.SENT,
    Status.SPOOLED: pb.SPOOLED,
    Status.SCHEDULED: pb.SCHEDULED,
    Status.DEAD: pb.DEAD,
    Status.CANCELLED: pb.CANCELLED,
}


ACK_MODES: dict[int, Ack] = {pb.ACK_BROKER: Ack.BROKER, pb.ACK_SPOOL: Ack.SPOOL}


def unknown_ack(value: int) -> RequestError:
    """An ack value the proto does not define (proto3 keeps it as the number), refused as HTTP's is."""
    return RequestError(f"ack must be one of ACK_BROKER, ACK_SPOOL; got {value}", field="ack")


def unknown_field(message: ProtoMessage, where: str = "", index: int | None = None) -> RequestError | None:
    """Why ``message`` (the request itself when ``where`` is "", else its field ``where``, item ``index``
    of it if given) is refused: a field this API does not define, which the decoder kept aside as an
    unknown field (proto3 keeps them, never refuses them); None when it has none. A newer client's field
    asks for something (a delay, say) that would silently not be done: refused as HTTP refuses an unknown
    JSON field. upb builds the set in C, without decoding anything again (see unknown_in_request's cost)."""
    unknown = UnknownFieldSet(message)
    if not len(unknown):
        return None
    number = unknown[0].field_number
    if index is not None:
        where = f"{where}[{index}]"
    return RequestError(
        f"{where or 'the request'} holds field number {number}, which this API does not define "
        "(a newer .proto's?): refused rather than ignored",
        field=f"{where}.{number}" if where else str(number),
    )


def unknown_in_request(
    request: pb.SendRequest | pb.PublishRequest | pb.BeginTransactionRequest,
) -> RequestError | None:
    """Why a request carrying one message is refused for a field this API does not define, in the request
    or its message (a map entry's are dropped by the decoder, and a map's entries take no new fields).
    About 0.3-0.9 us for a typical SendRequest (as much as decoding it): ByteSize() counts the unknown
    fields kept, so comparing it with the received length tells nothing, and the wire scan of
    app.api.grpc_edge reads only requests of tens of KiB."""
    return unknown_field(request) or unknown_field(request.message, "message")


def batch_specs(messages: Sequence[pb.Message]) -> list[MessageSpec | RequestError]:
    """A batch's messages as specs; one with a field this API does not define is an error that fails it
    alone (named ``messages[i]``), as an unknown field fails a message of HTTP's batch."""
    return [unknown_field(m, "messages", i) or spec_from_proto(m) for i, m in enumerate(messages)]


def spec_from_proto(m: pb.Message) -> MessageSpec:
    """The spec with only the fields the message has set: upb makes a container for every repeated or
    map field read and copying an empty one costs as much as a short one, so the usual message (a
    topic and a body) reads neither, and the spec keeps its defaults."""
    spec = MessageSpec(topic=m.topic)
    payload = m.WhichOneof("payload")
    if payload == "body":
        spec.body = m.body
    elif payload == "body_bytes":
        spec.body_bytes = m.body_bytes
    if m.HasField("tags"):
        spec.tags = m.tags
    if len(m.keys):
        spec.keys = list(m.keys)
    if len(m.properties):
        spec.properties = dict(m.properties)
    if m.HasField("sharding_key"):
        spec.sharding_key = m.sharding_key
    if m.HasField("type"):
        spec.type = m.type
    when = m.WhichOneof("when")
    if when == "delay_ms":
        spec.delay_ms = m.delay_ms
    elif when is not None:
        spec.deliver_at = m.deliver_at_ms if when == "deliver_at_ms" else m.deliver_at
    return spec


def _where(to: StoredAtLike | None) -> dict[str, Any]:
    """Where the broker stored it, named as in both messages (unknown: proto3's zero defaults)."""
    if to is None:
        return {}
    return {
        "broker": to.broker,
        "queue_id": to.queue_id,
        "queue_offset": to.queue_offset,
        "msg_id": to.offset_msg_id,
    }


def _common(o: Outcome | MessageState) -> dict[str, Any]:
    """The fields a send's answer and a status share, named as in both messages."""
    return {
        "id": o.id,
        "status": PB_STATUS[o.status],
        **_where(o.stored_at),
        "next_attempt_at_ms": o.next_attempt_at_ms or 0,
        "last_error": o.last_error or "",
        "deliver_at_ms": o.deliver_at_ms or 0,
    }


def fill_send_response(r: pb.SendResponse, o: Outcome) -> None:
    """``o`` written into ``r`` field by field, only the fields it has: on the hot path (an answer per
    message) that is half the time of building the keyword arguments and passing them."""
    r.id = o.id
    r.status = PB_STATUS[o.status]
    to = o.stored_at
    if to is not None:
        r.broker = to.broker
        r.queue_id = to.queue_id
        r.queue_offset = to.queue_offset
        r.msg_id = to.offset_msg_id
    if o.next_attempt_at_ms:
        r.next_attempt_at_ms = o.next_attempt_at_ms
    if o.last_error:
        r.last_error = o.last_error
    if o.deliver_at_ms:
        r.deliver_at_ms = o.deliver_at_ms


def send_response(o: Outcome) -> pb.SendResponse:
    r = pb.SendResponse()
    fill_send_response(r, o)
    return r


def publish_ack(sequence: int, o: Outcome) -> pb.PublishAck:
    ack = pb.PublishAck(sequence=sequence)
    fill_send_response(ack.result, o)  # writing into it marks result as set
    return ack


def error(exc: BaseException) -> pb.Error:
    """Why an item was refused (the error's field already spelled as gRPC's)."""
    body = problems.from_exception(exc)[1]
    return pb.Error(
        http_status=body["status"], title=body["title"], detail=body["detail"], field=body.get("field") or ""
    )


def batch_response(results: Sequence[BatchItem]) -> pb.SendBatchResponse:
    return pb.SendBatchResponse(
        results=[
            pb.BatchItem(index=i, result=send_response(r))
            if isinstance(r, Outcome)
            else pb.BatchItem(index=i, error=error(r))
            for i, r in enumerate(results)
        ]
    )


def message_status(s: MessageState) -> pb.MessageStatus:
    return pb.MessageStatus(
        **_common(s),
        topic=s.topic or "",
        attempts=s.attempts or 0,
        reason=s.reason or "",
        dead_at_ms=s.dead_at_ms or 0,
        sent_at_ms=s.sent_at_ms or 0,
        cancelled_at_ms=s.cancelled_at_ms or 0,
    )
