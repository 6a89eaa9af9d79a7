"""The HTTP listener on a node whose kernel has no IPv6 (ipv6.disable=1): the wildcard [::] (the chart's,
for dual-stack pods) falls back to 0.0.0.0, as docker/metrics_proxy.py does, rather than a traceback;
any other address that cannot be bound is a ListenError naming it."""

from __future__ import annotations

import errno
import socket

import pytest

from rocksidecar.app.api import servers
from rocksidecar.app.api.servers import HttpServer, ListenError


async def _app(scope: object, receive: object, send: object) -> None:  # never called
    raise AssertionError


async def test_wildcard_v6_on_a_kernel_without_ipv6_still_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: object, **kw: object) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(servers.socket, "socket", no_ipv6)
    server = HttpServer(_app, "[::]:0", grace_s=1.0)
    try:
        await server.start()  # as metrics_proxy.build_server: the wildcard means every address it has
    finally:
        await server.stop()
    assert server.port != 0
    with pytest.raises(ListenError, match=r"cannot listen on ::1:0"):  # not the wildcard: refused
        await HttpServer(_app, "[::1]:0", grace_s=1.0).start()
