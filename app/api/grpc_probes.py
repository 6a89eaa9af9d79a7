"""A gRPC method wrapper that asks the standard health and reflection services for the token.

The Sidecar service checks the token itself (app.api.grpc); grpc's own services do not. They say
whether the sidecar serves and describe its API, like /readyz does over HTTP, so by default they need
the token as /readyz does; ``probes_without_token`` opens them for probes that cannot send it.
"""

from __future__ import annotations

from typing import Any

import grpc

from .grpc_intercept import checked_first, kind_of
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


class ProbeToken:
    """A MethodWrapper (app.api.grpc_intercept): the probe methods check the call's metadata first."""

    def __init__(self, auth_token: str, *, without_token: bool = False) -> None:
        self._guards = Guards.of(auth_token)
        self._open = without_token or not auth_token

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        kind = kind_of(handler)
        if self._open or kind is None or not method.startswith(PROBE_PREFIXES):
            return handler
        # The same kind of behaviour (grpc checks it against the call), refusing before it runs.
        return handler._replace(**{kind: checked_first(kind, getattr(handler, kind), self._check)})

    async def _check(self, _request: Any, context: grpc.aio.ServicerContext) -> None:
        if not self._guards.authorized(dict(context.invocation_metadata() or ()).get("authorization")):
            await _refuse(context)
