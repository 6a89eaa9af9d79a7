"""A gRPC method wrapper that answers a request that is not valid protobuf with INVALID_ARGUMENT.

grpc deserializes before the servicer runs, and a DecodeError there ends the call as UNKNOWN with a
traceback in the log. Here every method's deserializer returns a marker instead of raising, and the
method refuses the marker: a unary call at once, a stream where the bad message would have been (the
messages before it are handled and acknowledged as usual).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from .grpc_intercept import checked_first, each_of, kind_of, result_of

DETAIL = "the request is not a valid protobuf message of this method's type"


class _Malformed:
    """Stands in for a request that did not decode."""


MALFORMED = _Malformed()


def _tolerant(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError:
            return MALFORMED

    return parse


class MalformedRequests:
    """A MethodWrapper (app.api.grpc_intercept)."""

    def __init__(self, on_malformed: Callable[[str], None]) -> None:
        self._on_malformed = on_malformed  # counts the refusal, by method name

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        refuse = self._refuser(method.rpartition("/")[2])
        wrapped: dict[str, Any] = {"request_deserializer": _tolerant(handler.request_deserializer)}
        kind = kind_of(handler)
        if kind is not None:
            wrapped[kind] = _WRAPPERS[kind](getattr(handler, kind), refuse, kind)
        return handler._replace(**wrapped)

    def _refuser(self, method: str) -> Callable[[grpc.aio.ServicerContext], Awaitable[None]]:
        async def refuse(context: grpc.aio.ServicerContext) -> None:
            self._on_malformed(method)
            context.set_trailing_metadata((("field", ""), ("http-status", "400")))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, DETAIL)

        return refuse


Refuse = Callable[[grpc.aio.ServicerContext], Awaitable[None]]


class _Requests:
    """A request stream that stops at the first malformed message and remembers that it did."""

    def __init__(self, requests: AsyncIterator[Any]) -> None:
        self._requests = requests
        self.malformed = False

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for request in self._requests:
            if request is MALFORMED:
                self.malformed = True
                return
            yield request


def _unary(behavior: Any, refuse: Refuse, kind: str) -> Any:
    if kind == "unary_unary" and inspect.iscoroutinefunction(behavior):
        # The sidecar's own unary methods: one coroutine per call (checked_first would add two more).
        async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if request is MALFORMED:
                await refuse(context)
            return await behavior(request, context)

        return answer

    async def check(request: Any, context: grpc.aio.ServicerContext) -> None:
        if request is MALFORMED:
            await refuse(context)

    return checked_first(kind, behavior, check)


def _stream_unary(behavior: Any, refuse: Refuse, kind: str) -> Any:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        checked = _Requests(requests)
        response = await result_of(behavior(checked.__aiter__(), context))
        if checked.malformed:
            await refuse(context)
        return response

    return call


def _stream_stream(behavior: Any, refuse: Refuse, kind: str) -> Any:
    # An async generator (the sidecar's Publish) is iterated as it is: each_of would add a generator
    # step to every answer of the stream.
    answers = _as_is if inspect.isasyncgenfunction(behavior) else each_of

    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        checked = _Requests(requests)
        async for response in answers(behavior(checked.__aiter__(), context)):
            yield response
        if checked.malformed:
            await refuse(context)

    return call


def _as_is(responses: AsyncIterator[Any]) -> AsyncIterator[Any]:
    return responses


_WRAPPERS: dict[str, Callable[[Any, Refuse, str], Any]] = {
    "unary_unary": _unary,
    "unary_stream": _unary,
    "stream_unary": _stream_unary,
    "stream_stream": _stream_stream,
}
