"""The base of the sidecar's gRPC server interceptors: each sees only the methods grpc has a handler for.

grpc.aio hands an interceptor the continuation, not the handler; every interceptor here awaits it,
lets an unknown method (no handler: grpc answers UNIMPLEMENTED) through, and decides from the handler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

# grpc's four kinds of method, as the RpcMethodHandler fields that hold their behaviour.
KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def kind_of(handler: grpc.RpcMethodHandler) -> str | None:
    """Which of the KINDS ``handler`` is (grpc sets exactly one behaviour), or None."""
    return next((kind for kind in KINDS if getattr(handler, kind) is not None), None)


class HandlerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc.aio is untyped
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return self.handle(handler, handler_call_details)

    def handle(
        self, handler: grpc.RpcMethodHandler, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """The handler that serves the call: ``handler`` itself or a replacement of the same kind."""
        raise NotImplementedError
