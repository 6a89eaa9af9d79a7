"""What the gRPC servicer asks of transactions (issue 29). The implementation lives with the coordinator
(app.transactions.grpc.GrpcTransactions), which imports this API package, so the servicer depends on this
shape only and the two packages do not import each other."""

from __future__ import annotations

from typing import Protocol

from ..request import RequestError
from .proto import rocksidecar_pb2 as pb


class TransactionRpcs(Protocol):
    async def begin(self, request: pb.BeginTransactionRequest) -> pb.Transaction:
        """Store the half; RequestError (naming the field) before anything is stored for bad input."""

    async def decide(self, tx_id: str, commit: bool) -> pb.Transaction:
        """Commit (True) or roll back: RequestError 404 for an unknown id, 409 for the other decision."""

    async def get(self, tx_id: str) -> pb.Transaction:
        """Where it stands: RequestError 404 for an unknown id."""


def enabled(rpcs: TransactionRpcs | None) -> TransactionRpcs:
    if rpcs is None:
        raise RequestError(
            "transactions are not enabled on this sidecar", field=None, status=501, title="Not implemented"
        )
    return rpcs
