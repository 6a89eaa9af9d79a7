"""Wrappers of the sidecar's gRPC method handlers, applied once per method as the services are added.

They do what server interceptors would (app.api.grpc_probes, app.api.grpc_edge), without grpc.aio's
interceptor pipeline: with interceptors, grpc.aio runs a chain of coroutines for every call before it
even has the handler, and each of ours then built a new handler for that call. Here each service adds
itself to a ``WrappingServer``, which hands grpc every handler already wrapped: grpc looks up the
wrapped handler and calls it, nothing more per call. An unknown method has no handler to wrap (grpc
answers UNIMPLEMENTED).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import grpc

# grpc's four kinds of method, as the RpcMethodHandler fields that hold their behaviour.
KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def kind_of(handler: grpc.RpcMethodHandler) -> str | None:
    """Which of the KINDS ``handler`` is (grpc sets exactly one behaviour), or None."""
    return next((kind for kind in KINDS if getattr(handler, kind) is not None), None)


# Runs before a behaviour with its request (a unary request, or the request iterator) and may end the
# call by aborting it.
Check = Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]


def checked_first(kind: str, behavior: Any, check: Check) -> Any:
    """``behavior``, a method's of ``kind``, with ``check`` awaited before it runs."""
    if kind.endswith("_stream"):  # it answers a stream

        async def answers(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await check(request, context)
            async for response in each_of(behavior(request, context)):
                yield response

        return answers

    async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await check(request, context)
        return await result_of(behavior(request, context))

    return answer


# Behaviours may be plain functions (sync servicers, such as some of grpc's own): their results are
# awaited or iterated only when they need it.
async def result_of(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def each_of(responses: Any) -> AsyncIterator[Any]:
    if inspect.isawaitable(responses):  # a coroutine that writes its answers (health's Watch)
        responses = await responses
        if responses is None:
            return
    if hasattr(responses, "__aiter__"):
        async for response in responses:
            yield response
    else:
        for response in responses:
            yield response


class MethodWrapper(Protocol):
    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler that serves ``method`` (``/package.Service/Method``): ``handler`` itself or a
        replacement of the same kind. Called once per method, never per call."""
        ...


class WrappingServer:
    """What the generated ``add_*_to_server`` functions are given instead of the server: the handlers
    they add reach ``server`` wrapped by ``wrappers`` (the first one outermost)."""

    def __init__(self, server: grpc.aio.Server, wrappers: Sequence[MethodWrapper]) -> None:
        self._server = server
        self._wrappers = tuple(reversed(wrappers))

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        for wrapper in self._wrappers:
            handler = wrapper.wrap(handler, method)
        return handler

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(tuple(_Wrapped(h, self.wrap) for h in handlers))

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        wrapped = {name: self.wrap(h, f"/{service}/{name}") for name, h in handlers.items()}
        self._server.add_registered_method_handlers(service, wrapped)


class _Wrapped(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc's base class is untyped
    """A generic handler whose answers are wrapped, each method's once: grpc's own generic handlers
    return the same handler object for a method every time, which is what the cache is keyed on. Only
    methods the inner handler knows are cached, so a client's made-up names cannot grow it."""

    def __init__(
        self,
        inner: grpc.GenericRpcHandler,
        wrap: Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler],
    ) -> None:
        self._inner = inner
        self._wrap = wrap
        self._done: dict[str, tuple[Any, grpc.RpcMethodHandler]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method)
        done = self._done.get(method)
        if done is None or done[0] is not handler:
            done = self._done[method] = (handler, self._wrap(handler, method))
        return done[1]
