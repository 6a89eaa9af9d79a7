"""The HTTP API (FastAPI): send, batch, status, cancel, plus /metrics, /healthz and /readyz.

Every error leaves as application/problem+json naming the field; OpenAPI is published at /openapi.json.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError

from app.api import json_count, problems
from app.api.guards import Guards
from app.api.middleware import EdgeMiddleware
from app.api.schemas import BatchIn, BatchOut, CancelOut, MessageIn, MessageStatusOut, Problem, SendOut
from app.api.views import batch_view, outcome_view, status_view
from app.idempotency import Answer, IdempotencyStore, fingerprint
from app.metrics import Metrics
from app.request import Limits, RequestError, prepare
from app.sidecar import Ack, CancelResult, Sidecar, Status

VALUES_PER_MESSAGE = 256  # on average in a batch: fields, keys and properties, with room to spare
Readiness = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
_PROBLEM = {"model": Problem, "content": {problems.PROBLEM_JSON: {}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {**_PROBLEM, "description": "Invalid input; `field` names it."},
    401: {**_PROBLEM, "description": "Missing or wrong bearer token."},
    403: {**_PROBLEM, "description": "A Host or Origin that is neither loopback nor configured."},
    413: {**_PROBLEM, "description": "Body or request too large."},
    415: {**_PROBLEM, "description": "The body is not application/json."},
    422: {
        **_PROBLEM,
        "description": "An Idempotency-Key reused for a different request, or a message the broker refused "
        "for itself.",
    },
    503: {**_PROBLEM, "description": "The local store cannot accept writes (see Retry-After)."},
}


@dataclass(frozen=True, slots=True)
class Api:
    """What the routes need."""

    sidecar: Sidecar
    limits: Limits
    batch_limit: int
    metrics: Metrics
    readiness: Readiness
    idempotency: IdempotencyStore | None
    now_ms: Callable[[], int]

    def problem(self, exc: BaseException) -> Response:
        status, body, headers = problems.from_exception(exc)
        return Response(
            orjson.dumps(body), status_code=status, media_type=problems.PROBLEM_JSON, headers=headers
        )

    async def answer(
        self, key: str | None, request: Request, compute: Callable[[], Awaitable[Answer]]
    ) -> Response:
        try:
            if key is None or self.idempotency is None:
                status, body = await compute()
            else:
                if not 1 <= len(key) <= 255:
                    raise RequestError("Idempotency-Key must be 1-255 characters", field="Idempotency-Key")
                fp = fingerprint(request.url.path, str(request.query_params), await request.body())
                status, body = await self.idempotency.run(key, fp, compute)
        except Exception as exc:
            return self.problem(exc)
        headers = {"Retry-After": str(problems.RETRY_AFTER_S)} if status == 503 else None
        media = problems.PROBLEM_JSON if status >= 400 else "application/json"
        return Response(orjson.dumps(body), status_code=status, media_type=media, headers=headers)

    def count(self, outcome: str, n: int = 1) -> None:
        if n:
            self.metrics.messages.labels(outcome).inc(n)


def create_app(
    sidecar: Sidecar,
    *,
    limits: Limits,
    batch_limit: int,
    metrics: Metrics,
    readiness: Readiness,
    idempotency: IdempotencyStore | None = None,
    auth_token: str = "",
    max_request_bytes: int = 64 * 1024 * 1024,
    now_ms: Callable[[], int],
    edge: Guards | None = None,
) -> FastAPI:
    app = FastAPI(
        title="rocksidecar",
        version="1",
        summary="Reliable delivery to Apache RocketMQ: a message "
        "answered 2xx is stored by a broker or synced to the local store.",
        redoc_url=None,
    )
    single = limits.max_body_bytes * 4 // 3 + 1024 * 1024  # base64 plus room for the JSON around it
    app.add_middleware(
        EdgeMiddleware,
        metrics=metrics,
        guards=edge or Guards.of(auth_token),
        limits={"/v1/messages": single, "/v1/messages:batch": max(single, max_request_bytes)},
        default_limit=single,
        routes=app.router.routes,
    )
    api = Api(sidecar, limits, batch_limit, metrics, readiness, idempotency, now_ms)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        api.count("rejected")
        return Response(
            orjson.dumps(problems.from_validation(exc.errors())),
            status_code=400,
            media_type=problems.PROBLEM_JSON,
        )

    _message_routes(app, api)
    _state_routes(app, api)
    _ops_routes(app, api)
    _document_bodies(app, (MessageIn, BatchIn))
    return app


def _document_bodies(app: FastAPI, models: tuple[type[BaseModel], ...]) -> None:
    """Add the request-body models of the hot routes to the OpenAPI components they reference."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                doc = model.model_json_schema(ref_template="#/components/schemas/{model}", by_alias=True)
                components.update(doc.pop("$defs", {}))
                components[model.__name__] = doc
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a route that reads its own body (see ``_parse``): the same body and parameters that
    FastAPI would document for typed parameters."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        },
        "parameters": [
            {
                "name": "ack",
                "in": "query",
                "required": False,
                "description": "broker: send now, spool if that "
                "fails; spool: store first, deliver in the background.",
                "schema": {"type": "string", "enum": [a.value for a in Ack], "default": Ack.BROKER.value},
            },
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "The same key within the window returns the first answer and sends nothing.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            },
        ],
    }


M = TypeVar("M", bound=BaseModel)


async def _parse(request: Request, model: type[M]) -> tuple[M, Ack, str | None]:
    """Body, ack and Idempotency-Key of a hot route. FastAPI's dependency solving cost more per request
    than the send itself; pydantic's validate_json on the raw body is the same validation, cheaper.

    Raises:
        RequestError: naming the bad field.
    """
    try:
        parsed = model.model_validate_json(await request.body())
    except ValidationError as exc:
        doc = problems.from_validation(exc.errors(include_url=False))
        raise RequestError(doc["detail"], field=doc.get("field"), title=doc["title"]) from None
    raw_ack = request.query_params.get("ack", Ack.BROKER.value)
    try:
        ack = Ack(raw_ack)
    except ValueError:
        raise RequestError(
            f"ack must be one of {[a.value for a in Ack]}, got {problems.clip(raw_ack)}", field="ack"
        ) from None
    return parsed, ack, request.headers.get("idempotency-key")


def _bound_batch(body: bytes, batch_limit: int) -> None:
    """Refuse a batch far over the limit before parsing builds all of it (issue 11, item 7); the exact
    count is checked after parsing.

    Raises:
        RequestError: 413 naming ``messages``.
    """
    values = batch_limit * VALUES_PER_MESSAGE
    if not json_count.values_at_most(body, values):
        raise RequestError(
            f"a batch holds 1 to {batch_limit} messages and at most {values} JSON values",
            field="messages",
            status=413,
        )


def _message_routes(app: FastAPI, api: Api) -> None:
    @app.post(
        "/v1/messages",
        response_model=SendOut,
        summary="Send one message",
        openapi_extra=_body_doc(MessageIn),
        responses={
            202: {
                "model": SendOut,
                "description": "Stored locally: SPOOLED (delivered in the background) or "
                "SCHEDULED (delayed).",
            },
            501: {**_PROBLEM, "description": "Delayed delivery is not enabled."},
            **_ERRORS,
        },
    )
    async def send(request: Request) -> Response:
        try:
            msg, ack, idempotency_key = await _parse(request, MessageIn)
        except RequestError as exc:
            api.count("rejected")
            return api.problem(exc)

        async def compute() -> Answer:
            try:
                outcome = await api.sidecar.send(prepare(msg, api.limits, api.now_ms()), ack)
            except Exception as exc:
                status, body, _ = problems.from_exception(exc)
                api.count("rejected" if status < 500 else "failed")
                return status, body
            api.count(outcome.status.value.lower())
            return (200 if outcome.status is Status.SENT else 202), outcome_view(outcome)

        return await api.answer(idempotency_key, request, compute)

    @app.post(
        "/v1/messages:batch",
        response_model=BatchOut,
        responses=_ERRORS,
        openapi_extra=_body_doc(BatchIn),
        summary="Send a batch; one result per message, in order",
    )
    async def send_batch(request: Request) -> Response:
        try:
            _bound_batch(await request.body(), api.batch_limit)
            batch, ack, idempotency_key = await _parse(request, BatchIn)
            if not batch.messages or len(batch.messages) > api.batch_limit:
                raise RequestError(
                    f"a batch holds 1 to {api.batch_limit} messages",
                    field="messages",
                    status=413 if batch.messages else 400,
                )
        except RequestError as exc:
            api.count("rejected")
            return api.problem(exc)

        async def compute() -> Answer:
            now = api.now_ms()
            items: list[Any] = []
            for i, m in enumerate(batch.messages):
                try:
                    items.append(prepare(m, api.limits, now))
                except RequestError as exc:
                    items.append(exc.within(f"messages[{i}]"))
            view = batch_view(await api.sidecar.send_batch(items, ack))
            for outcome in ("sent", "spooled", "scheduled", "rejected", "failed"):
                api.count(outcome, view[outcome])
            return 200, view

        return await api.answer(idempotency_key, request, compute)


def _state_routes(app: FastAPI, api: Api) -> None:
    @app.get(
        "/v1/messages/{id}",
        response_model=MessageStatusOut,
        responses={
            404: {
                **_PROBLEM,
                "description": "Unknown here, or sent directly (only spooled, scheduled and "
                "dead-lettered messages are tracked).",
            },
            **_ERRORS,
        },
        summary="Where a spooled, scheduled or dead-lettered message stands",
    )
    async def get_message(id: str) -> Response:
        try:
            found = await api.sidecar.status(id)
        except Exception as exc:
            return api.problem(exc)
        if found is None:
            return api.problem(
                RequestError(
                    f"no spooled, scheduled or dead-lettered message {problems.clip(id)}",
                    field="id",
                    status=404,
                    title="Not found",
                )
            )
        return Response(orjson.dumps(status_view(found)), media_type="application/json")

    @app.delete(
        "/v1/messages/{id}",
        response_model=CancelOut,
        summary="Cancel a scheduled message",
        responses={
            404: {**_PROBLEM, "description": "No scheduled message with this id."},
            409: {**_PROBLEM, "description": "Already sent."},
            **_ERRORS,
        },
    )
    async def cancel(id: str) -> Response:
        try:
            result = await api.sidecar.cancel(id)
        except Exception as exc:
            return api.problem(exc)
        if result is CancelResult.NOT_FOUND:
            return api.problem(
                RequestError(
                    f"no scheduled message {problems.clip(id)}", field="id", status=404, title="Not found"
                )
            )
        if result is CancelResult.ALREADY_SENT:
            return api.problem(
                RequestError(
                    f"message {problems.clip(id)} was already sent", field="id", status=409, title="Conflict"
                )
            )
        return Response(orjson.dumps({"id": id, "status": "CANCELLED"}), media_type="application/json")


def _ops_routes(app: FastAPI, api: Api) -> None:
    @app.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary="Ready: the store is writable and RocketMQ is reachable",
        responses={503: {"description": "Not ready; the body says why."}},
    )
    async def readyz() -> Response:
        ok, details = await api.readiness()
        return Response(
            orjson.dumps({"ready": ok, **details}),
            status_code=200 if ok else 503,
            media_type="application/json",
        )

    @app.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}},
    )
    async def prometheus() -> Response:
        return Response(generate_latest(api.metrics.registry), media_type=CONTENT_TYPE_LATEST)
