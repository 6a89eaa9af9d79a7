"""The dmq process's HTTP port: liveness, readiness and Prometheus metrics (no message API). /readyz has
serve's shape (``ready``, and ``reason`` when not ready) so one probe or dashboard reads both."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def create_app(registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> FastAPI:
    app = FastAPI(title="rocksidecar dmq", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz(response: Response) -> dict[str, bool | str]:
        ok, reason = ready()
        response.status_code = 200 if ok else 503
        return {"ready": True} if ok else {"ready": False, "reason": reason}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
