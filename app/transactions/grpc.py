"""The gRPC transaction methods over the coordinator, by the HTTP routes' rules: the message is checked as
Send checks it (field names as gRPC spells them) before anything is stored, a delayed one is refused, an
unknown id is NOT_FOUND and the other decision FAILED_PRECONDITION (409), a repeat answers the same.

Wired by passing ``GrpcTransactions(coordinator, limits, now_ms)`` as the servicer's ``transactions``."""

from __future__ import annotations

from collections.abc import Callable

from ..api.grpc_views import spec_from_proto
from ..api.problems import clip
from ..api.proto import rocksidecar_pb2 as pb
from ..request import GRPC_FIELDS, Limits, RequestError, prepare
from .coordinator import TransactionConflict, TransactionCoordinator, TransactionNotFound
from .http import MAX_KEY_CHARS
from .records import Decision, Record

_STATES = {
    Decision.NONE: pb.TX_PREPARED,
    Decision.COMMIT: pb.TX_COMMITTED,
    Decision.ROLLBACK: pb.TX_ROLLED_BACK,
}


def transaction_proto(record: Record) -> pb.Transaction:
    answer = pb.Transaction(
        id=record.id,
        state=_STATES[record.decision],
        transaction_key=record.transaction_key,
        topic=record.topic,
        created_ms=record.created_ms,
        decided_ms=record.decided_ms or 0,
        acknowledged=record.acknowledged,
    )
    r = record.receipt
    if r is not None:  # broker mode: where the half is (a local-outbox record has no half)
        answer.broker, answer.queue_id = r.broker_name, r.queue.queue_id
        answer.half_offset, answer.msg_id = r.queue_offset, r.offset_msg_id
    return answer


def _not_found(tx_id: str) -> RequestError:
    return RequestError.not_found(f"no transaction {clip(tx_id)} here", field="id")


def _checked_id(tx_id: str) -> str:
    if not tx_id:
        raise RequestError("id is required", field="id")
    return tx_id


class GrpcTransactions:
    """app.api.grpc_transactions.TransactionRpcs over a coordinator."""

    def __init__(
        self, coordinator: TransactionCoordinator, limits: Limits, now_ms: Callable[[], int]
    ) -> None:
        self._coordinator = coordinator
        self._limits = limits
        self._now_ms = now_ms

    async def begin(self, request: pb.BeginTransactionRequest) -> pb.Transaction:
        key = request.transaction_key if request.HasField("transaction_key") else None
        if key is not None and not 1 <= len(key) <= MAX_KEY_CHARS:
            raise RequestError(
                f"transaction_key must be a string of 1 to {MAX_KEY_CHARS} characters",
                field="transaction_key",
            )
        if not request.HasField("message"):
            raise RequestError("message is required", field="message")
        prepared = prepare(spec_from_proto(request.message), self._limits, self._now_ms(), GRPC_FIELDS)
        if prepared.deliver_at_ms is not None:
            delayed = request.message.WhichOneof("when") == "delay_ms"
            field = GRPC_FIELDS.delay_ms if delayed else GRPC_FIELDS.deliver_at  # as Send's errors name it
            raise RequestError("a transactional message cannot be delayed", field=field)
        record = await self._coordinator.begin(
            prepared.message, transaction_key=key, sharding_key=prepared.sharding_key,
            message_type=prepared.type,
        )  # fmt: skip
        return transaction_proto(record)

    async def decide(self, tx_id: str, commit: bool) -> pb.Transaction:
        try:
            record = await self._coordinator.decide(
                _checked_id(tx_id), Decision.COMMIT if commit else Decision.ROLLBACK
            )
        except TransactionNotFound:
            raise _not_found(tx_id) from None
        except TransactionConflict as exc:
            raise RequestError(str(exc), field="id", status=409, title="Conflict") from None
        return transaction_proto(record)

    async def get(self, tx_id: str) -> pb.Transaction:
        record = self._coordinator.records.get(_checked_id(tx_id))
        if record is None:
            raise _not_found(tx_id)
        return transaction_proto(record)
