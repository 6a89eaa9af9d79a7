"""HTTP routes of transactions (broker mode): begin, commit, rollback, status.

``POST /v1/transactions`` takes what ``POST /v1/messages`` takes, checked by the same rules (so a message
that could never be sent is refused 4xx before anything is stored), plus an optional ``transactionKey``
the app's check endpoint is told; delays are refused, as Java's TransactionMQProducer drops them. An
``Idempotency-Key`` is honoured as there (and as gRPC's BeginTransaction honours its idempotency_key).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

from rocksidecar.rmq.errors import RocketMQError

from ..api import problems
from ..api.http import IDEMPOTENCY_KEY_DOC, REPLAYED_DOC, answered, reply, response
from ..api.parsing import parse_message
from ..delivery_policy import message_fault
from ..idempotency import Answer, IdempotencyStore
from ..request import Limits, RequestError, prepare
from .coordinator import TransactionConflict, TransactionCoordinator, TransactionNotFound
from .records import Decision, Record

MAX_KEY_CHARS = 256
MAX_BEGIN_BYTES = 8 * 1024 * 1024  # a message's JSON; the edge middleware bounds the request first
STATES = {Decision.NONE: "PREPARED", Decision.COMMIT: "COMMITTED", Decision.ROLLBACK: "ROLLED_BACK"}


def view(record: Record) -> dict[str, Any]:
    doc = record.to_json()
    doc["state"] = STATES[record.decision]
    return doc


def _json(doc: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status_code=status, media_type="application/json")


def _refused(exc: BaseException) -> Answer:
    """The problem answering ``exc`` (what an Idempotency-Key keeps, as for POST /v1/messages)."""
    if isinstance(exc, TransactionNotFound):
        return 404, problems.problem(404, "Not found", f"no transaction {exc} here")
    if isinstance(exc, TransactionConflict):
        return 409, problems.problem(409, "Conflict", str(exc))
    if isinstance(exc, RocketMQError) and message_fault(exc):  # never stored, as POST /v1/messages
        return 422, problems.problem(422, "Message refused", f"the broker refused the message: {exc}")
    status, doc, _ = problems.from_exception(exc)  # its one header, Retry-After on a 503: reply adds it
    return status, doc


def _problem(exc: BaseException) -> Response:
    return response(reply(*_refused(exc)))


def _split_key(raw: bytes) -> tuple[bytes, str | None]:
    """The message part of the body and the transactionKey beside it (RequestError when bad)."""
    if len(raw) > MAX_BEGIN_BYTES:
        raise RequestError(f"the request body exceeds {MAX_BEGIN_BYTES} bytes", field=None, status=413)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}", field=None) from None
    if not isinstance(doc, dict) or "transactionKey" not in doc:
        return raw, None
    key = doc.pop("transactionKey")
    if key is not None and (not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS):
        raise RequestError(
            f"transactionKey must be a string of 1 to {MAX_KEY_CHARS} characters", field="transactionKey"
        )
    return orjson.dumps(doc), key


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI of the problem+json answers a route may give (with the edge's 400 and 401)."""
    why = {
        400: "Invalid input; `field` names it.",
        401: "Missing or wrong bearer token (when one is configured).",
        404: "No transaction has this id here.", 409: "Decided the other way already.",
        413: "The request is too large.", 422: "The broker refused the message itself; nothing was kept.",
        503: "No broker stored the half (mode broker), or the local store cannot take writes.",
    }  # fmt: skip
    return {c: {"description": why[c], "content": {problems.PROBLEM_JSON: {}}} for c in (400, 401, *codes)}


_RECORD = {"content": {"application/json": {"schema": {"type": "object"}}}}
_BEGIN_BODY = {
    "requestBody": {
        "required": True,
        "description": "What POST /v1/messages takes (no delay), plus an optional transactionKey "
        f"(1 to {MAX_KEY_CHARS} characters) the app's check endpoint is told.",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MessageIn"}}},
    },
    "parameters": [IDEMPOTENCY_KEY_DOC],
}


def transaction_routes(
    app: FastAPI,
    coordinator: TransactionCoordinator,
    limits: Limits,
    now_ms: Callable[[], int],
    idempotency: IdempotencyStore | None = None,
) -> None:
    @app.post(
        "/v1/transactions",
        summary="Begin: keep the message (a half message, or the local outbox) until it is decided",
        status_code=201,
        openapi_extra=_BEGIN_BODY,
        responses={
            201: {"description": "Begun: PREPARED.", "headers": REPLAYED_DOC, **_RECORD},
            **_errors(413, 422, 503),
        },
    )
    async def begin(request: Request) -> Response:
        body = await request.body()
        try:
            raw, key = _split_key(body)
            prepared = prepare(parse_message(raw), limits, now_ms())
            if prepared.deliver_at_ms is not None:
                raise RequestError("a transactional message cannot be delayed", field="delayMs")
        except Exception as exc:
            return _problem(exc)

        async def compute() -> Answer:
            try:
                record = await coordinator.begin(
                    prepared.message, transaction_key=key, sharding_key=prepared.sharding_key,
                    message_type=prepared.type,
                )  # fmt: skip
            except Exception as exc:
                return _refused(exc)
            return 201, view(record)

        # Once per Idempotency-Key, as POST /v1/messages: a client retrying a begin after a timeout gets
        # the first transaction back, not a second half message under the same transactionKey.
        idempotency_key = request.headers.get("idempotency-key")
        return response(await answered(idempotency, idempotency_key, request.url.path, "", body, compute))

    def decision_route(decision: Decision, summary: str) -> None:
        async def decide(tx_id: str) -> Response:
            try:
                record = await coordinator.decide(tx_id, decision)
            except Exception as exc:
                return _problem(exc)
            return _json(view(record))

        app.add_api_route(
            f"/v1/transactions/{{tx_id}}:{decision.value}", decide, methods=["POST"], summary=summary,
            name=decision.value, responses={
                200: {"description": f"{STATES[decision]} (also when repeated).", **_RECORD},
                **_errors(404, 409, 503),
            },
        )  # fmt: skip

    decision_route(Decision.COMMIT, "Commit: the message is delivered")
    decision_route(Decision.ROLLBACK, "Roll back: the message is never delivered")

    @app.get(
        "/v1/transactions/{tx_id}",
        summary="Where a transaction stands",
        responses={200: {"description": "PREPARED, COMMITTED or ROLLED_BACK.", **_RECORD}, **_errors(404)},
    )
    async def status(tx_id: str) -> Response:
        record = coordinator.records.get(tx_id)
        if record is None:
            return _problem(TransactionNotFound(tx_id))
        return _json(view(record))
