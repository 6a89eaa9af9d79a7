"""A plain ASGI middleware for what every request needs before routing (BaseHTTPMiddleware costs too much
per call): the Host, Origin, bearer-token and Content-Type guards (app.api.guards), size limits enforced
while the body streams in, and the per-route request counter, labelled by route template only.

A body that grows past its limit is answered 413 at once and the connection closed; the route sees a
client disconnect. A client that goes away mid-request is counted as 499 (nginx's "client closed
request"), not as a 500 with a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.routing import BaseRoute, Match

from ..metrics import Metrics
from . import guards, problems
from .guards import Guards

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# A hot route answered by the edge itself: (scope, headers by lower-case name, whole body) -> status,
# body, media type, headers.
FastRoute = Callable[[Scope, dict[bytes, bytes], bytes], Awaitable[tuple[int, bytes, str, dict[str, str]]]]

log = logging.getLogger(__name__)
CLIENT_CLOSED = 499
UNMATCHED = "(unmatched)"
# Set in a scope by the HTTP protocol (app.api.http_protocol) when it refused the request's body (the parser
# failed in it) and counted the refusal itself: the http.disconnect its app then receives is no client's.
REFUSED = "rocksidecar.refused"
_CLOSE = {
    "connection": "close"
}  # a body over the limit is not read on (see app.api.http_protocol, app.api.hot_http)


class Refusal(Exception):
    """A request refused before any route sees it, as a problem+json answer: the edge raises it, and the
    connection protocols (app.api.http_protocol, app.api.hot_http) answer their own with it."""

    def __init__(self, status: int, title: str, detail: str, field: str, headers: dict[str, str]) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.field, self.headers = status, title, detail, field, headers


@dataclass(eq=False, slots=True)
class EdgeMiddleware:
    """The ASGI edge: guards, body limits and metrics for every request; the hot POST routes in ``fast``
    are answered here without the router."""

    app: ASGIApp
    metrics: Metrics = field(kw_only=True)
    guards: Guards = field(kw_only=True)
    limits: Mapping[str, int] = field(kw_only=True)
    default_limit: int = field(kw_only=True)
    routes: list[BaseRoute] = field(kw_only=True)  # the app's own list: routes added later are matched too
    fast: Mapping[str, FastRoute] = field(default_factory=dict, kw_only=True)  # POST path -> route
    _counters: dict[tuple[str, int], Any] = field(default_factory=dict, init=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope["path"], self.default_limit)
        try:
            headers = _headers(scope)
            self._check(scope, headers, limit)
        except Refusal as r:
            await answer_refusal(send, r)
            self._count(scope, r.status)
            return
        route = self.fast.get(scope["path"]) if scope["method"] == "POST" else None
        if route is not None:
            await self._fast(scope, receive, send, headers, limit, route)
            return
        await self._run(scope, receive, send, limit)

    async def _fast(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        limit: int,
        route: FastRoute,
    ) -> None:
        """A hot route without Starlette's router, request and response objects (issue 18): the same
        guards (checked before), limits, answers and counting as the slow path, fewer objects per request."""
        status, started = 500, False
        try:
            chunks: list[bytes] = []
            received = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":  # the client went away mid-body
                    status = 0 if REFUSED in scope else CLIENT_CLOSED  # 0: the protocol counted it
                    return
                chunk = message.get("body", b"")
                received += len(chunk)
                if received > limit:
                    status = 413
                    await answer_refusal(send, _too_large(limit))
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            answer, payload, media, extra = await route(
                scope, headers, chunks[0] if len(chunks) == 1 else b"".join(chunks)
            )
            raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
            raw += [(b"content-length", b"%d" % len(payload)), (b"content-type", media.encode("latin-1"))]
            status, started = answer, True
            await send({"type": "http.response.start", "status": answer, "headers": raw})
            await send({"type": "http.response.body", "body": payload})
        except Exception:
            # What Starlette's ServerErrorMiddleware did before the edge was outermost: a 500 (unless the
            # answer had begun), never a 2xx; the server logs the exception.
            if not started:
                await answer_refusal(send, INTERNAL_ERROR)
            raise
        finally:
            if status:
                self.count_as(scope["path"], status)

    def admit(self, method: str, path: str, headers: dict[bytes, bytes]) -> tuple[FastRoute, int] | None:
        """For the HTTP protocol's own hot path (app.api.hot_http): the hot route of a request that
        passes every guard (``headers`` by lower-case name, the first of repeated ones), and the route's
        body limit. None sends the request the ASGI way: not a hot route, refused (this edge answers the
        refusal there), or a body of unknown length, which the ASGI way bounds while it streams in."""
        route = self.fast.get(path) if method == "POST" else None
        if route is None or b"transfer-encoding" in headers or b"content-length" not in headers:
            return None
        limit = self.limits.get(path, self.default_limit)
        try:
            self._check({"method": method, "path": path}, headers, limit)
        except Refusal:
            return None
        return route, limit

    def _check(self, scope: Scope, headers: dict[bytes, bytes], limit: int) -> None:
        """Refuse before routing: checked in this order so that a page on another origin learns nothing."""
        if not self.guards.host_ok(headers.get(b"host")):
            raise Refusal(403, "Forbidden", "this Host is not served here (see allowed_hosts)", "Host", {})
        if not self.guards.origin_ok(headers.get(b"origin")):
            raise Refusal(
                403, "Forbidden", "cross-origin requests are refused (see allowed_origins)", "Origin", {}
            )
        if guards.needs_token(scope["path"]) and not self.guards.authorized(headers.get(b"authorization")):
            raise Refusal(
                401,
                "Unauthorized",
                "a valid 'Authorization: Bearer <token>' header is required",
                "Authorization",
                {"www-authenticate": "Bearer"},
            )
        has_body = _content_length(headers) > 0 or b"transfer-encoding" in headers
        content_type = headers.get(b"content-type")
        if (
            scope["method"] in guards.BODY_METHODS
            and (has_body or content_type is not None)
            and not guards.is_json(content_type)
        ):
            raise Refusal(
                415,
                "Unsupported media type",
                "the body must be 'Content-Type: application/json'",
                "Content-Type",
                {},
            )
        if _content_length(headers) > limit:
            raise _too_large(limit)

    async def _run(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        status = 500
        received = 0
        answered = False  # we answered (413) while the body streamed in: drop what the app sends
        started = False
        gone = False  # the client went away before an answer started

        async def bounded_receive() -> Message:
            nonlocal received, answered, gone, status
            if answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    answered = True
                    status = 413
                    await answer_refusal(send, _too_large(limit))
                    return {"type": "http.disconnect"}
            elif message["type"] == "http.disconnect" and not started:
                gone = True
            return message

        async def counting_send(message: Message) -> None:
            nonlocal status, started
            if answered:
                return
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        try:
            await self.app(scope, bounded_receive, counting_send)
        except Exception:
            if not (answered or gone):
                raise
            # The route failed reading a body we cut off or the client abandoned: nobody to tell.
            log.debug("request ended early (%s)", "too large" if answered else "client gone", exc_info=True)
        finally:
            if not gone or REFUSED not in scope:  # refused: the protocol counted it
                self._count(scope, CLIENT_CLOSED if gone and not answered else status)

    def _count(self, scope: Scope, status: int) -> None:
        self.count_as(self._template(scope), status)

    def count_as(self, template: str, status: int) -> None:
        counter = self._counters.get((template, status))
        if counter is None:  # labels() costs a lock and a tuple per call: keep each child
            counter = self.metrics.requests.labels("http", template, str(status))
            if len(self._counters) < 1024:  # templates and statuses are few; bounded all the same
                self._counters[(template, status)] = counter
        counter.inc()

    def _template(self, scope: Scope) -> str:
        """The route's template (``/v1/messages/{id}``), never the raw path: an attacker chooses paths."""
        route = scope.get("route")
        if route is None:
            for candidate in self.routes:
                match, _ = candidate.matches(scope)
                if match is not Match.NONE:
                    route = candidate
                    break
        return getattr(route, "path", None) or UNMATCHED


def _too_large(limit: int) -> Refusal:
    return Refusal(413, "Request too large", f"the request is larger than {limit} bytes", "body", _CLOSE)


INTERNAL_ERROR = Refusal(500, "Internal Server Error", "the request failed", "", {})


def problem_body(r: Refusal) -> bytes:
    return orjson.dumps(problems.problem(r.status, r.title, r.detail, r.field))


async def answer_refusal(send: Send, r: Refusal, extra: dict[str, str] | None = None) -> None:
    """``r`` as an ASGI answer (problem+json), with ``extra`` headers beside its own."""
    body = problem_body(r)
    raw = [
        (b"content-type", problems.PROBLEM_JSON.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    raw += [(k.encode(), v.encode()) for k, v in (r.headers | extra if extra else r.headers).items()]
    await send({"type": "http.response.start", "status": r.status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


_HOST_COUNT = Refusal(
    400, "Bad request", "an HTTP/1.1 request has exactly one Host header field, and no request has more",
    "Host", {},
)  # fmt: skip


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by (lower-case) name; of repeated ones, the first. Refused (RFC 9112 3.2: MUST
    400) with more than one Host, or none in HTTP/1.1: the Host guard reads one, and a request without
    one passed it. Checked here, before the guards, for what uvicorn's protocol reads (app.api.hot_http
    hands such requests over)."""
    out: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name not in out:
            out[name] = value
        elif name == b"host":
            raise _HOST_COUNT
    if b"host" not in out and scope.get("http_version") == "1.1":
        raise _HOST_COUNT
    return out


def _content_length(headers: dict[bytes, bytes]) -> int:
    try:
        return int(headers.get(b"content-length", b"0"))
    except ValueError:
        return 0
