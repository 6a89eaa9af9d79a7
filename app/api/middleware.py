"""A plain ASGI middleware for what every request needs before routing: the bearer token, a size limit
read from Content-Length, and the per-route request counter (BaseHTTPMiddleware costs too much per call)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from app.api import problems
from app.metrics import Metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class EdgeMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: Metrics, auth_token: str, limits: dict[str, int]) -> None:
        self.app = app
        self.metrics = metrics
        self.expected = f"Bearer {auth_token}".encode() if auth_token else b""
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if self.expected and path.startswith("/v1/") and not self._authorized(scope):
            await self._reject(
                scope,
                send,
                401,
                "Unauthorized",
                "a valid 'Authorization: Bearer <token>' header is required",
                {"www-authenticate": "Bearer"},
                "Authorization",
            )
            return
        limit = self.limits.get(path)
        if limit is not None and _content_length(scope) > limit:
            await self._reject(
                scope, send, 413, "Request too large", f"the request is larger than {limit} bytes", {}, "body"
            )
            return
        status = 500

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "(unmatched)"
            self.metrics.requests.labels("http", template, str(status)).inc()

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                return hmac.compare_digest(value, self.expected)
        return False

    async def _reject(
        self,
        scope: Scope,
        send: Send,
        status: int,
        title: str,
        detail: str,
        headers: dict[str, str],
        field: str,
    ) -> None:
        body = orjson.dumps(problems.problem(status, title, detail, field))
        raw = [
            (b"content-type", problems.PROBLEM_JSON.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        raw += [(k.encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})
        self.metrics.requests.labels("http", scope["path"], str(status)).inc()


def _content_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0
