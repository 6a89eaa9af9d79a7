"""The HTTP API (FastAPI): send, batch, status, cancel, plus /metrics, /healthz and /readyz.

Every error leaves as application/problem+json naming the field; OpenAPI is published at /openapi.json.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, TypeVar, cast

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from ..idempotency import (
    MAX_KEY_CHARS,
    Answer,
    IdempotencyStore,
    KeyRefused,
    answer_once,
    canonical_json,
    fingerprint,
)
from ..metrics import exposition
from ..request import HTTP_FIELDS, Limits, MessageFields, RequestError
from ..sidecar import BROKER, Ack
from ..tracing.context import TraceContext, from_headers
from . import json_count, problems
from .access_log import AccessLogMiddleware
from .admin import AdminOps, admin_routes
from .docs import offline_docs
from .guards import Guards
from .middleware import ASGIApp, EdgeMiddleware, FastRoute, Receive, Scope, Send
from .operations import EdgeDeps, Operations, send_status
from .parsing import VALUES_PER_MESSAGE, BatchSpecs, parse_batch, parse_message
from .schemas import (
    BatchIn,
    BatchOut,
    CancelOut,
    HealthOut,
    MessageIn,
    MessageStatusOut,
    Problem,
    ReadyOut,
    SendOut,
)
from .ui import UiDeps, ui_routes
from .views import batch_view, outcome_view, status_view

_P = TypeVar("_P")  # what a route parses its body into
REPLAYED_HEADER = "Idempotent-Replayed"  # "true" on an answer repeated for an Idempotency-Key
Readiness = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
Reply = tuple[int, bytes, str, dict[str, str]]  # status, body, media type, headers
_PROBLEM = {"model": Problem, "content": {problems.PROBLEM_JSON: {}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {**_PROBLEM, "description": "Invalid input; `field` names it."},
    401: {**_PROBLEM, "description": "Missing or wrong bearer token (when one is configured)."},
    403: {**_PROBLEM, "description": "A Host or Origin that is neither loopback nor configured."},
    413: {**_PROBLEM, "description": "Body or request too large, or a batch over the limit."},
    415: {**_PROBLEM, "description": "The body is not application/json."},
    422: {
        **_PROBLEM,
        "description": "An Idempotency-Key reused for a different request, or a message the broker refused "
        "for itself.",
    },
    503: {**_PROBLEM, "description": "The local store cannot take writes or reads (see Retry-After)."},
}
REPLAYED_DOC = {
    REPLAYED_HEADER: {
        "description": "`true` when this is the stored answer to an earlier request with the same "
        "Idempotency-Key (nothing was sent again).",
        "schema": {"type": "string", "enum": ["true"]},
    }
}
IDEMPOTENCY_KEY_DOC = {  # the header parameter of the routes that answer through ``answered``
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "The same key within the window returns the first answer and sends nothing.",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS},
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of one route."""
    return {code: _ERRORS[code] for code in codes}


def problem_reply(exc: BaseException) -> Reply:
    status, body, headers = problems.from_exception(exc)
    return status, orjson.dumps(body), problems.PROBLEM_JSON, headers


def reply(status: int, doc: Any, replayed: bool = False) -> Reply:
    """An answer's reply: its JSON, media type and headers (Retry-After on a 503)."""
    headers = {"Retry-After": str(problems.RETRY_AFTER_S)} if status == 503 else {}
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    media = problems.PROBLEM_JSON if status >= 400 else "application/json"
    return status, orjson.dumps(doc), media, headers


async def answered(
    store: IdempotencyStore | None,
    key: str | None,
    path: str,
    query: str,
    body: bytes,
    compute: Callable[[], Awaitable[Answer]],
    api: Api | None = None,
    raw_query: bytes | None = None,
) -> Reply:
    """``compute``'s answer as a reply, once per Idempotency-Key (``key``; None: none given): a repeat
    gets the first answer with Idempotent-Replayed, a repeat with another request a 422. Every HTTP
    route that takes the header answers through here (the sends, a transaction's begin). ``api``: the
    message routes' edge, which counts a message refused for its key as the bad input it is (None: a
    route whose bad input is not counted as messages, a transaction's begin). ``raw_query``: the query
    string as received, for the fingerprint before 431331e (None: a route that came after it)."""

    async def request_fingerprint() -> str:
        # The same request in other spacing, key order or with ack spelled out is the same request.
        return fingerprint(path, query, canonical_json(body))

    def legacy_fingerprint() -> str:
        # The rule before 431331e (2026-11-23): the query string as Starlette prints it and the raw body.
        # Answers kept under it stay in the store for the idempotency window (24 h by default): without
        # this, their retries after the upgrade were refused 422 (the client told a stored message failed,
        # or resending it under a new key: a duplicate). Asked only when a kept answer's fingerprint is
        # not today's. It never matches another request's of today's rule: its query part is empty or
        # holds "=", an ack value neither. Remove it once every sidecar has run 431331e or later for the
        # window.
        return fingerprint(path, str(QueryParams(raw_query or b"")), body)

    try:
        if key is None:  # nothing to answer once: one coroutine layer less per request (issue 32)
            (status, doc), replayed = await compute(), False
        else:
            (status, doc), replayed = await answer_once(
                store,
                key,
                request_fingerprint,
                compute,
                field=HTTP_FIELDS.idempotency_key,
                legacy_fingerprint=None if raw_query is None else legacy_fingerprint,
            )
    except KeyRefused as exc:  # an except clause more: nothing for a request that is not refused
        return problem_reply(exc) if api is None else api.rejected(exc)
    except Exception as exc:
        return problem_reply(exc)
    return reply(status, doc, replayed)


class Api:
    """What the routes need: the HTTP edge's operations and readiness probe. What a request reads is
    resolved here once, not through ``ops`` per request."""

    __slots__ = ("batch_limit", "idempotency", "metrics", "ops", "readiness")

    def __init__(self, ops: Operations, readiness: Readiness) -> None:
        self.ops, self.readiness = ops, readiness
        self.batch_limit, self.metrics, self.idempotency = ops.batch_limit, ops.metrics, ops.idempotency

    def problem(self, exc: BaseException) -> Response:
        return response(problem_reply(exc))

    def answer(
        self,
        key: str | None,
        path: str,
        body: bytes,
        ack: Ack,
        compute: Callable[[], Awaitable[Answer]],
        raw_query: bytes,
    ) -> Awaitable[Reply]:
        return answered(self.idempotency, key, path, ack.value, body, compute, self, raw_query)

    def rejected(self, exc: RequestError) -> Reply:
        """The reply to bad input, counted."""
        self.count("rejected")
        return problem_reply(exc)

    def count(self, outcome: str, n: int = 1) -> None:
        if n:
            self.metrics.count_messages(outcome, n)


class SidecarApp(FastAPI):
    """FastAPI behind the edge. ``edge`` (guards, limits, counting and the hot routes; the access log
    around it when on) runs before Starlette's own middleware, so a hot route pays for no Starlette layer
    (issue 18); everything else goes on through FastAPI as before."""

    edge: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.edge is None:
            await super().__call__(scope, receive, send)
        else:
            await self.edge(scope, receive, send)


def create_app(
    deps: EdgeDeps,
    *,
    readiness: Readiness,
    auth_token: str = "",
    max_request_bytes: int = 64 * 1024 * 1024,
    access_log: bool = False,
    admin: AdminOps | None = None,
    ui: UiDeps | None = None,
    edge: Guards | None = None,
    fast_path: bool = True,
) -> SidecarApp:
    app = SidecarApp(
        title="rocksidecar",
        version="1",
        summary="Reliable delivery to Apache RocketMQ: a message "
        "answered 2xx is stored by a broker or synced to the local store.",
        redoc_url=None,
        docs_url=None,  # offline_docs serves it without a CDN
    )
    limits, batch_limit, metrics = deps.limits, deps.batch_limit, deps.metrics
    single = limits.max_body_bytes * 4 // 3 + 1024 * 1024  # base64 plus room for the JSON around it
    api = Api(Operations.of(deps, HTTP_FIELDS), readiness)
    # X-Forwarded-For from a trusted proxy, as uvicorn would apply it (the server leaves it to us, so
    # that the hot routes, which never read the client address, skip it); uvicorn's own setting.
    trusted = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
    inner = cast(ASGIApp, ProxyHeadersMiddleware(functools.partial(FastAPI.__call__, app), trusted))
    stack: ASGIApp = EdgeMiddleware(
        inner,
        metrics=metrics,
        guards=edge or Guards.of(auth_token),
        limits={"/v1/messages": single, "/v1/messages:batch": max(single, max_request_bytes)},
        default_limit=single,
        routes=app.router.routes,
        fast=_fast_routes(api) if fast_path else {},
    )
    app.edge = AccessLogMiddleware(stack) if access_log else stack  # outermost: logs the edge's refusals

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        api.count("rejected")
        return Response(
            orjson.dumps(problems.from_validation(exc.errors())),
            status_code=400,
            media_type=problems.PROBLEM_JSON,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(app, request))
        title = _phrase(exc.status_code)
        path = request.url.path if len(request.url.path) <= 200 else request.url.path[:200] + "..."
        detail = f"no {request.method} on {path}" if exc.status_code in (404, 405) else str(exc.detail)
        return Response(
            orjson.dumps(problems.problem(exc.status_code, title, detail)),
            status_code=exc.status_code,
            media_type=problems.PROBLEM_JSON,
            headers=headers,
        )

    _message_routes(app, api)
    _state_routes(app, api)
    _ops_routes(app, api)
    offline_docs(app)
    if admin is not None:
        admin_routes(app, admin)
    if ui is not None:
        ui_routes(app, ui)
    _document_bodies(app, (MessageIn, BatchIn), limits, batch_limit)
    return app


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route takes on this path (Starlette's Allow names only the first route's)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _document_bodies(
    app: FastAPI, models: tuple[type[BaseModel], ...], limits: Limits, batch_limit: int
) -> None:
    """Add the request-body models of the hot routes to the OpenAPI components they reference, with this
    sidecar's configured limits."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                doc = model.model_json_schema(ref_template="#/components/schemas/{model}", by_alias=True)
                components.update(doc.pop("$defs", {}))
                components[model.__name__] = doc
            components["BatchIn"]["properties"]["messages"]["maxItems"] = batch_limit
            components["MessageIn"]["properties"]["delayMs"]["maximum"] = limits.max_delay_ms
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a route that reads its own body (see ``app.api.parsing``): the body and parameters that
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
                "description": "broker: send now, spool if that fails (a message whose sharding key has "
                "messages spooled is spooled behind them, untried); spool: store first, deliver in the "
                "background.",
                "schema": {"type": "string", "enum": [a.value for a in Ack], "default": Ack.BROKER.value},
            },
            IDEMPOTENCY_KEY_DOC,
        ],
    }


def _ack(raw_ack: str | None) -> Ack:
    """The ack parameter of a hot route. Raises RequestError naming it."""
    if raw_ack is None:
        return BROKER
    try:
        return Ack(raw_ack)
    except ValueError:
        raise RequestError(
            f"ack must be one of {[a.value for a in Ack]}, got {problems.clip(raw_ack)}", field="ack"
        ) from None


def _fast_routes(api: Api) -> dict[str, FastRoute]:
    """The hot routes as the edge answers them itself, past FastAPI's router (issue 18): the same
    send_one/send_many as the routes below, from the raw query string and headers (decoded as Starlette
    does: latin-1, the first of repeated headers, the last of repeated query parameters)."""

    def route(handle: Callable[..., Awaitable[Reply]]) -> FastRoute:
        async def fast(scope: Scope, headers: dict[bytes, bytes], body: bytes) -> Reply:
            key = headers.get(b"idempotency-key")
            parent = headers.get(b"traceparent")  # the one check a request without a trace pays
            trace = None if parent is None else _trace(parent, headers.get(b"tracestate"))
            return await handle(
                api,
                scope["path"],
                body,
                scope["query_string"],
                None if key is None else key.decode("latin-1"),
                trace,
            )

        return fast

    return {"/v1/messages": route(send_one), "/v1/messages:batch": route(send_many)}


def _trace(parent: bytes, state: bytes | None) -> TraceContext | None:
    """The request's W3C trace context; an invalid one is ignored (see app.tracing.context)."""
    return from_headers(parent.decode("latin-1"), None if state is None else state.decode("latin-1"))


def response(parts: Reply) -> Response:
    status, body, media, headers = parts
    return Response(body, status_code=status, media_type=media, headers=headers)


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
            200: {"description": "SENT: stored by a broker.", "headers": REPLAYED_DOC},
            202: {
                "model": SendOut,
                "description": "Stored locally: SPOOLED (delivered in the background) or "
                "SCHEDULED (delayed).",
                "headers": REPLAYED_DOC,
            },
            501: {**_PROBLEM, "description": "Delayed delivery is not enabled in this sidecar."},
            **_errors(400, 401, 413, 422, 503),
        },
    )
    async def send(request: Request) -> Response:
        return await _routed(send_one, api, request)

    @app.post(
        "/v1/messages:batch",
        response_model=BatchOut,
        responses={
            200: {
                "description": "One result per message, in order; a bad item fails only itself.",
                "headers": REPLAYED_DOC,
            },
            **_errors(400, 401, 413, 422, 503),
        },
        openapi_extra=_body_doc(BatchIn),
        summary="Send a batch; one result per message, in order",
    )
    async def send_batch(request: Request) -> Response:
        return await _routed(send_many, api, request)


async def _routed(handle: Callable[..., Awaitable[Reply]], api: Api, request: Request) -> Response:
    """A hot route through FastAPI's router (the edge's fast path normally answers first)."""
    key, query = request.headers.get("idempotency-key"), request.scope["query_string"]
    trace = from_headers(request.headers.get("traceparent"), request.headers.get("tracestate"))
    return response(await handle(api, request.url.path, await request.body(), query, key, trace))


def _raw_ack(query: bytes) -> str | None:
    """The ack parameter as Starlette reads it (the last of repeated ones), None without."""
    return QueryParams(query).get("ack") if query else None


async def send_one(
    api: Api, path: str, body: bytes, query: bytes, key: str | None, trace: TraceContext | None = None
) -> Reply:
    """``POST /v1/messages`` from its parts: the FastAPI route and the edge's fast path both answer
    through here. ``query``: the raw query string, the ack's and a kept answer's legacy fingerprint's
    (Api.answer)."""
    raw_ack = _raw_ack(query)
    if key is not None:
        return await _parsed_then(
            api,
            path,
            body,
            raw_ack,
            key,
            parse_message,
            lambda msg, ack: _send_answer(api, msg, ack, trace),
            query,
        )
    # Without an Idempotency-Key (most requests): what _parsed_then and Api.answer do, without their
    # coroutines and closures (issue 32).
    try:
        msg = parse_message(body)
        ack = BROKER if raw_ack is None else _ack(raw_ack)
    except RequestError as exc:
        return api.rejected(exc)
    try:
        status, doc = await _send_answer(api, msg, ack, trace)
    except Exception as exc:
        return problem_reply(exc)
    return reply(status, doc)


async def _send_answer(api: Api, msg: MessageFields, ack: Ack, trace: TraceContext | None) -> Answer:
    """What ``POST /v1/messages`` answers once it has parsed ``msg``: the outcome, or the problem."""
    try:
        outcome = await api.ops.send(msg, ack, trace)
    except Exception as exc:
        status, doc, _ = problems.from_exception(exc)
        return status, doc
    return send_status(outcome), outcome_view(outcome)


async def send_many(
    api: Api, path: str, body: bytes, query: bytes, key: str | None, trace: TraceContext | None = None
) -> Reply:
    """``POST /v1/messages:batch`` from its parts (see send_one)."""

    def parse(data: bytes) -> BatchSpecs:
        _bound_batch(data, api.batch_limit)
        return parse_batch(data, api.batch_limit)

    async def compute(batch: BatchSpecs, ack: Ack) -> Answer:
        return 200, batch_view(await api.ops.send_batch(batch, ack, trace))

    return await _parsed_then(api, path, body, _raw_ack(query), key, parse, compute, query)


async def _parsed_then(
    api: Api,
    path: str,
    body: bytes,
    raw_ack: str | None,
    key: str | None,
    parse: Callable[[bytes], _P],
    compute: Callable[[_P, Ack], Awaitable[Answer]],
    query: bytes,
) -> Reply:
    """Parse the body and the ack first: bad input is counted and answered 4xx before anything runs;
    good input is answered once per idempotency key."""
    try:
        parsed = parse(body)
        ack = _ack(raw_ack)
    except RequestError as exc:
        return api.rejected(exc)
    return await api.answer(key, path, body, ack, lambda: compute(parsed, ack), query)


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
            **_errors(401, 503),
        },
        summary="Where a spooled, scheduled or dead-lettered message stands",
    )
    async def get_message(id: str) -> Response:
        try:
            found = await api.ops.status(id)
        except Exception as exc:
            return api.problem(exc)
        return Response(orjson.dumps(status_view(found)), media_type="application/json")

    @app.delete(
        "/v1/messages/{id}",
        response_model=CancelOut,
        summary="Cancel a scheduled message",
        responses={
            404: {**_PROBLEM, "description": "No scheduled message with this id."},
            409: {**_PROBLEM, "description": "Already sent."},
            **_errors(401, 503),
        },
    )
    async def cancel(id: str) -> Response:
        try:
            await api.ops.cancel(id)
        except Exception as exc:
            return api.problem(exc)
        return Response(orjson.dumps({"id": id, "status": "CANCELLED"}), media_type="application/json")


def _ops_routes(app: FastAPI, api: Api) -> None:
    @app.get("/healthz", summary="The process is alive", response_model=HealthOut)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary="Ready: a send can succeed now (the store takes writes, a broker is usable)",
        response_model=ReadyOut,
        responses={503: {"model": ReadyOut, "description": "Not ready; `reason` says why."}},
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
        responses={200: {"content": {"text/plain": {}, "application/openmetrics-text": {}}}},
    )
    async def prometheus(request: Request) -> Response:
        """The classic text format, or OpenMetrics with exemplars (latencies' trace ids) when asked."""
        body, content_type = exposition(api.metrics.registry, request.headers.get("accept"))
        return Response(body, media_type=content_type)
