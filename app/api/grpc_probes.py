"""A gRPC server interceptor that asks the standard health and reflection services for the token.

The Sidecar service checks the token itself (app.api.grpc); grpc's own services do not. They say
whether the sidecar serves and describe its API, like /readyz does over HTTP, so by default they need
the token as /readyz does; ``probes_without_token`` opens them for probes that cannot send it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from .grpc_intercept import HandlerInterceptor, kind_of
from .guards import Guards

# The services grpc adds (app.api.grpc.add_health_and_reflection), by method-name prefix.
PROBE_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
DETAIL = "a valid 'authorization: Bearer <token>' metadata entry is required"


async def _refuse(context: grpc.aio.ServicerContext) -> None:
    context.set_trailing_metadata((("field", "authorization"), ("http-status", "401")))
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, DETAIL)


async def _refused_unary(_request: Any, context: grpc.aio.ServicerContext) -> Any:
    await _refuse(context)


async def _refused_stream(_request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    await _refuse(context)
    yield  # pragma: no cover  # abort raises; this makes the function a generator


class ProbeToken(HandlerInterceptor):
    def __init__(self, auth_token: str, *, without_token: bool = False) -> None:
        self._guards = Guards.of(auth_token)
        self._open = without_token or not auth_token

    def handle(
        self, handler: grpc.RpcMethodHandler, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        method = str(handler_call_details.method)
        if self._open or not method.startswith(PROBE_PREFIXES):
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        if self._guards.authorized(metadata.get("authorization")):
            return handler
        # The same kind of handler (grpc checks it against the call), answering UNAUTHENTICATED.
        kind = kind_of(handler) or "stream_stream"
        refused = _refused_stream if kind.endswith("_stream") else _refused_unary  # by what it answers
        return handler._replace(**{kind: refused})
