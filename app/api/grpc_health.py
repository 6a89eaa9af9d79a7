"""The standard grpc.health.v1 service, whose Watch streams end when the server stops.

grpcio-health-checking's servicer answers a Watch from a loop that ends only when its client goes away:
``enter_graceful_shutdown`` turns every service it knows NOT_SERVING and wakes the watches to say so,
but leaves them open (a Watch of a service it does not know is not even woken). Each then holds the
server's stop for its whole grace, and a client that checks health on its own (a service config's
``healthCheckConfig``) holds one open on every connection. Here Watch is the same loop over this class's
copy of the statuses, kept through the servicer's public methods (its own table is private), and it
ends, OK, once the server stops, after it has sent the watch's last status (NOT_SERVING).
"""

from __future__ import annotations

import asyncio
from typing import Any

from grpc_health.v1 import health, health_pb2

_Status = int  # a HealthCheckResponse.ServingStatus (the package has no type stubs)


class EndingHealth(health.aio.HealthServicer):  # type: ignore[misc]  # the package has no type stubs
    """grpc's health servicer, whose Watch ends once ``enter_graceful_shutdown`` has been awaited."""

    def __init__(self) -> None:
        super().__init__()
        self._statuses: dict[str, _Status] = {"": health_pb2.HealthCheckResponse.SERVING}  # as the base's
        self._changed = asyncio.Event()  # set (and replaced) on every change
        self._ended = False  # the server is stopping: every watch ends

    async def set(self, service: str, status: _Status) -> None:
        await super().set(service, status)
        if not self._ended:  # ignored from then on, as the base ignores it
            self._statuses[service] = status
            self._notify()

    async def enter_graceful_shutdown(self) -> None:
        await super().enter_graceful_shutdown()
        if not self._ended:
            self._ended = True
            for service in self._statuses:
                self._statuses[service] = health_pb2.HealthCheckResponse.NOT_SERVING
            self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        last: _Status | None = None
        while True:
            changed = self._changed  # taken first: a change while the status is written is not missed
            status = self._statuses.get(request.service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
            if status != last:  # an unchanged status is not sent again (nor is one skipped over)
                await context.write(health_pb2.HealthCheckResponse(status=status))
                last = status
            if self._ended:
                return
            await changed.wait()
