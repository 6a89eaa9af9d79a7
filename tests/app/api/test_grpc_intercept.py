"""app.api.grpc_intercept: handlers are wrapped once per method when services are added, never per call,
and a method the services do not know is neither wrapped nor remembered."""

from __future__ import annotations

from typing import Any

import grpc

from rocksidecar.app.api.grpc_intercept import WrappingServer


class _Server:
    """Records what would reach grpc.aio's server."""

    def __init__(self) -> None:
        self.generic: list[Any] = []
        self.registered: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.registered[service] = handlers


class _Counting:
    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.calls: list[str] = []

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        self.calls.append(method)
        inner = handler.unary_unary
        return handler._replace(unary_unary=lambda req, ctx: [self.tag, *inner(req, ctx)])


class _Details(grpc.HandlerCallDetails):  # type: ignore[misc]
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


def test_each_method_is_wrapped_once_first_wrapper_outermost() -> None:
    server = _Server()
    outer, inner = _Counting("outer"), _Counting("inner")
    services = WrappingServer(server, [outer, inner])  # type: ignore[arg-type]
    handlers = {"Send": grpc.unary_unary_rpc_method_handler(lambda req, ctx: ["send"])}
    services.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("p.S", handlers),))
    services.add_registered_method_handlers("p.S", handlers)

    generic = server.generic[0]
    found = [generic.service(_Details("/p.S/Send")) for _ in range(3)]
    assert found[0] is found[1] is found[2]  # the same wrapped handler on every call
    assert found[0].unary_unary(None, None) == ["outer", "inner", "send"]
    assert server.registered["p.S"]["Send"].unary_unary(None, None) == ["outer", "inner", "send"]
    assert outer.calls == inner.calls == ["/p.S/Send", "/p.S/Send"]  # once generic, once registered

    assert generic.service(_Details("/p.S/Made-up")) is None
    assert outer.calls == ["/p.S/Send", "/p.S/Send"] and len(generic._done) == 1
