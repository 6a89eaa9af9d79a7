"""The dmq process's HTTP port: liveness, readiness and Prometheus metrics (no message API). /readyz has
serve's shape (``ready``, ``store``, ``nameServer``, ``writableBrokers``, ``brokers``, and ``reason``
when not ready: app.readiness builds both) so one probe or dashboard reads both.

Every path passes serve's Host and Origin checks first (app.api.guards, answered as app.api.middleware
answers them): a DNS-rebinding page must not read /readyz (broker names, store errors) or /metrics. A
Host naming the address the request came in on is answered too (a pod IP that kubelet's probes and
Prometheus name): a rebinding page names its own domain, never an address."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Receive, Scope, Send

from ..api.guards import Guards, host_name
from ..api.middleware import Refusal, problem_body
from ..api.problems import PROBLEM_JSON
from ..metrics import exposition

_HOST = Refusal(403, "Forbidden", "this Host is not served here (see allowed_hosts)", "Host", {})
_ORIGIN = Refusal(403, "Forbidden", "cross-origin requests are refused (see allowed_origins)", "Origin", {})


class HostOriginGuard:
    """serve's edge checks of Host and Origin (there is no token, body or POST here) before any route."""

    def __init__(self, app: ASGIApp, guards: Guards) -> None:
        self.app, self.guards = app, guards

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.refusal(scope) if scope["type"] == "http" else None
        if refused is None:
            await self.app(scope, receive, send)
            return
        answer = Response(problem_body(refused), status_code=refused.status, media_type=PROBLEM_JSON)
        await answer(scope, receive, send)

    def refusal(self, scope: Scope) -> Refusal | None:
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)  # of repeated ones, the first (as the edge reads them)
        host = headers.get(b"host")
        if not self.guards.host_ok(host) and not _own_address(host, scope):
            return _HOST
        if not self.guards.origin_ok(headers.get(b"origin")):
            return _ORIGIN
        return None


def _own_address(host: bytes | None, scope: Scope) -> bool:
    server = scope.get("server")
    return (
        host is not None
        and server is not None
        and host_name(host.decode("latin-1")) == str(server[0]).lower().strip("[]")
    )


def create_app(
    registry: CollectorRegistry,
    ready: Callable[[], Awaitable[tuple[bool, dict[str, Any]]]],
    guards: Guards | None = None,
) -> FastAPI:
    """``guards``: the Host and Origin names answered besides loopback ones (no token: these paths have
    none); by default loopback only."""
    app = FastAPI(title="rocksidecar dmq", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(HostOriginGuard, guards=guards or Guards())

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(response: Response) -> dict[str, Any]:
        ok, details = await ready()
        response.status_code = 200 if ok else 503
        return {"ready": ok, **details}

    @app.get("/metrics")
    def metrics(request: Request) -> Response:
        body, content_type = exposition(registry, request.headers.get("accept"))
        return Response(body, media_type=content_type)

    return app
