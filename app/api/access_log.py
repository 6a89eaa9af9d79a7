"""The access log (off by default, ``ROCKSIDECAR_ACCESS_LOG``): one line per HTTP request with its
method, path, status and duration. Query strings and bodies are left out (they may carry data)."""

from __future__ import annotations

import logging
import time

from .middleware import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("rocksidecar.access")


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            ms = (time.perf_counter() - started) * 1000
            client = scope.get("client")
            log.info(
                "%s %s %d %.1f ms",
                scope["method"],
                scope["path"],
                status,
                ms,
                extra={
                    "event": "access",
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": round(ms, 3),
                    "client": f"{client[0]}:{client[1]}" if client else None,
                },
            )
