"""The dmq process's HTTP port: liveness, readiness and Prometheus metrics (no message API). /readyz has
serve's shape (``ready``, ``store``, ``nameServer``, ``writableBrokers``, ``brokers``, and ``reason``
when not ready: app.readiness builds both) so one probe or dashboard reads both."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry

from ..metrics import exposition


def create_app(
    registry: CollectorRegistry, ready: Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
) -> FastAPI:
    app = FastAPI(title="rocksidecar dmq", docs_url=None, redoc_url=None, openapi_url=None)

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
