"""The gRPC API (grpc.aio): the HTTP API's operations with the same validation and statuses.

Errors end the call with a gRPC code mapped from the HTTP status, the problem's detail as the message,
and trailing metadata ``field`` and ``http-status``. Publish acknowledges each streamed message once it
is stored, by the sequence number the client gave it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from app.api import grpc_subscribe, problems
from app.api.guards import Guards
from app.api.parsing import check_batch_size
from app.api.proto import rocksidecar_pb2 as pb
from app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from app.api.views import batch_view, outcome_view, status_view
from app.idempotency import Answer, IdempotencyStore, check_key, fingerprint
from app.metrics import Metrics
from app.request import Limits, MessageSpec, RequestError, prepare
from app.sidecar import Ack, CancelResult, Sidecar, Status
from app.subscriptions.stream import StreamHub

PUBLISH_IN_FLIGHT = 256
_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
}
# gRPC field names are snake_case where HTTP's are camelCase.
_FIELD_NAMES = {
    "bodyBase64": "body_bytes",
    "shardingKey": "sharding_key",
    "delayMs": "delay_ms",
    "deliverAt": "deliver_at",
    "Idempotency-Key": "idempotency_key",
}


def spec_from_proto(m: pb.Message) -> MessageSpec:
    payload = m.WhichOneof("payload")
    when = m.WhichOneof("when")
    return MessageSpec(
        topic=m.topic,
        body=m.body if payload == "body" else None,
        body_bytes=m.body_bytes if payload == "body_bytes" else None,
        tags=m.tags if m.HasField("tags") else None,
        keys=tuple(m.keys),
        properties=dict(m.properties),
        sharding_key=m.sharding_key if m.HasField("sharding_key") else None,
        type=m.type if m.HasField("type") else None,
        delay_ms=m.delay_ms if when == "delay_ms" else None,
        deliver_at=(
            m.deliver_at_ms if when == "deliver_at_ms" else m.deliver_at if when == "deliver_at" else None
        ),
    )


_HTTP_NAMES = re.compile(r"\b(" + "|".join(map(re.escape, _FIELD_NAMES)) + r")\b")
REPLAYED_METADATA = "idempotent-replayed"  # "true" on an answer repeated for an idempotency_key


def _grpc_field(text: str | None) -> str:
    """A field path or an error message with the HTTP API's field names in gRPC's (``delay_ms``)."""
    return _HTTP_NAMES.sub(lambda m: _FIELD_NAMES[m.group(1)], text) if text else ""


def _send_response(view: dict[str, Any]) -> pb.SendResponse:
    return pb.SendResponse(
        id=view["id"],
        status=pb.Status.Value(view["status"]),
        broker=view.get("broker", ""),
        queue_id=view.get("queueId", 0),
        queue_offset=view.get("queueOffset", 0),
        msg_id=view.get("msgId", ""),
        next_attempt_at_ms=view.get("nextAttemptAt", 0),
        last_error=view.get("lastError", ""),
        deliver_at_ms=view.get("deliverAt", 0),
    )


def _error(body: dict[str, Any]) -> pb.Error:
    return pb.Error(
        http_status=body["status"],
        title=body["title"],
        detail=_grpc_field(body["detail"]),
        field=_grpc_field(body.get("field")),
    )


class SidecarServicer(pb_grpc.SidecarServicer):
    def __init__(
        self,
        sidecar: Sidecar,
        *,
        limits: Limits,
        batch_limit: int,
        metrics: Metrics,
        idempotency: IdempotencyStore | None,
        now_ms: Callable[[], int],
        auth_token: str = "",
        hubs: Mapping[str, StreamHub] | None = None,
    ) -> None:
        self._hubs = dict(hubs or {})  # gRPC subscriptions by name (Subscribe, Ack)
        self._sidecar = sidecar
        self._limits = limits
        self._batch_limit = batch_limit
        self._metrics = metrics
        self._idempotency = idempotency
        self._now_ms = now_ms
        self._guards = Guards.of(auth_token)

    # plumbing -----------------------------------------------------------------------------------
    async def _abort(
        self, context: grpc.aio.ServicerContext, status: int, body: dict[str, Any], method: str
    ) -> NoReturn:
        self._metrics.requests.labels("grpc", method, str(status)).inc()
        context.set_trailing_metadata(
            (("field", _grpc_field(body.get("field"))), ("http-status", str(status)))
        )
        await context.abort(_CODES.get(status, grpc.StatusCode.INTERNAL), _grpc_field(body["detail"]))
        raise AssertionError("abort returns only by raising")  # pragma: no cover

    async def _check_auth(self, context: grpc.aio.ServicerContext, method: str) -> None:
        given = dict(context.invocation_metadata() or ()).get("authorization")
        if not self._guards.authorized(given):
            await self._abort(
                context,
                401,
                problems.problem(
                    401,
                    "Unauthorized",
                    "a valid 'authorization: Bearer <token>' metadata entry is required",
                    "authorization",
                ),
                method,
            )

    async def _answered(
        self,
        context: grpc.aio.ServicerContext,
        method: str,
        key: str,
        request_bytes: bytes,
        compute: Callable[[], Awaitable[Answer]],
    ) -> dict[str, Any]:
        """Run ``compute`` (through the idempotency store when a key is given); abort on a 4xx/5xx.
        ``request_bytes`` is the request serialized deterministically (map entries in key order)."""
        await self._check_auth(context, method)
        computed = False

        async def first() -> Answer:
            nonlocal computed
            computed = True
            return await compute()

        try:
            if key and self._idempotency is not None:
                check_key(key)
                status, body = await self._idempotency.run(
                    key, fingerprint(f"/grpc/{method}", "", request_bytes), first
                )
                if not computed:
                    await context.send_initial_metadata(((REPLAYED_METADATA, "true"),))
            else:
                status, body = await compute()
        except Exception as exc:
            status, body, _ = problems.from_exception(exc)
        if status >= 400:
            await self._abort(context, status, body, method)
        self._metrics.requests.labels("grpc", method, str(status)).inc()
        return body

    async def _one(self, message: pb.Message, ack: Ack) -> Answer:
        try:
            outcome = await self._sidecar.send(
                prepare(spec_from_proto(message), self._limits, self._now_ms()), ack
            )
        except Exception as exc:
            status, body, _ = problems.from_exception(exc)
            self._metrics.messages.labels("rejected" if status < 500 else "failed").inc()
            return status, body
        self._metrics.messages.labels(outcome.status.value.lower()).inc()
        return (200 if outcome.status is Status.SENT else 202), outcome_view(outcome)

    # RPCs ---------------------------------------------------------------------------------------
    async def Send(self, request: pb.SendRequest, context: grpc.aio.ServicerContext) -> pb.SendResponse:
        body = await self._answered(
            context,
            "Send",
            request.idempotency_key,
            request.SerializeToString(deterministic=True),
            lambda: self._one(request.message, Ack(_ack(request.ack))),
        )
        return _send_response(body)

    async def SendBatch(
        self, request: pb.SendBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendBatchResponse:
        async def compute() -> Answer:
            check_batch_size(len(request.messages), self._batch_limit)
            now = self._now_ms()
            items: list[Any] = []
            for i, m in enumerate(request.messages):
                try:
                    items.append(prepare(spec_from_proto(m), self._limits, now))
                except RequestError as exc:
                    items.append(exc.within(f"messages[{i}]"))
            view = batch_view(await self._sidecar.send_batch(items, Ack(_ack(request.ack))))
            for outcome in ("sent", "spooled", "scheduled", "rejected", "failed"):
                if view[outcome]:
                    self._metrics.messages.labels(outcome).inc(view[outcome])
            return 200, view

        view = await self._answered(
            context,
            "SendBatch",
            request.idempotency_key,
            request.SerializeToString(deterministic=True),
            compute,
        )
        return pb.SendBatchResponse(
            results=[
                pb.BatchItem(index=item["index"], error=_error(item["error"]))
                if "error" in item
                else pb.BatchItem(index=item["index"], result=_send_response(item))
                for item in view["results"]
            ]
        )

    async def Publish(
        self, request_iterator: AsyncIterator[pb.PublishRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PublishAck]:
        await self._check_auth(context, "Publish")
        acks: asyncio.Queue[pb.PublishAck | None] = asyncio.Queue()
        slots = asyncio.Semaphore(PUBLISH_IN_FLIGHT)
        tasks: set[asyncio.Task[None]] = set()

        async def handle(req: pb.PublishRequest) -> None:
            try:
                status, body = await self._one(req.message, Ack(_ack(req.ack)))
                ack = (
                    pb.PublishAck(sequence=req.sequence, error=_error(body))
                    if status >= 400
                    else pb.PublishAck(sequence=req.sequence, result=_send_response(body))
                )
                await acks.put(ack)
            finally:
                slots.release()

        async def read() -> None:
            try:
                async for req in request_iterator:
                    await slots.acquire()
                    task = asyncio.create_task(handle(req))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                await asyncio.gather(*tasks)
            finally:
                await acks.put(None)

        reader = asyncio.create_task(read())
        try:
            while (ack := await acks.get()) is not None:
                yield ack
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        self._metrics.requests.labels("grpc", "Publish", "200").inc()

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Delivery]:
        await self._check_auth(context, "Subscribe")
        try:
            hub = grpc_subscribe.hub_for(self._hubs, request.subscription)
        except RequestError as exc:
            status, body, _ = problems.from_exception(exc)
            await self._abort(context, status, body, "Subscribe")
        self._metrics.requests.labels("grpc", "Subscribe", "200").inc()
        async for delivery in grpc_subscribe.stream(hub):
            yield delivery

    async def Ack(self, request: pb.AckRequest, context: grpc.aio.ServicerContext) -> pb.AckResponse:
        async def compute() -> Answer:
            grpc_subscribe.ack(self._hubs, request)
            return 200, {}

        await self._answered(context, "Ack", "", b"", compute)
        return pb.AckResponse()

    async def GetMessage(
        self, request: pb.GetMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.MessageStatus:
        async def compute() -> Answer:
            found = await self._sidecar.status(request.id)
            if found is None:
                raise RequestError(
                    f"no spooled, scheduled or dead-lettered message {problems.clip(request.id)}",
                    field="id",
                    status=404,
                    title="Not found",
                )
            return 200, status_view(found)

        v = await self._answered(context, "GetMessage", "", b"", compute)
        return pb.MessageStatus(
            id=v["id"],
            status=pb.Status.Value(v["status"]),
            topic=v.get("topic", ""),
            attempts=v.get("attempts", 0),
            next_attempt_at_ms=v.get("nextAttemptAt", 0),
            deliver_at_ms=v.get("deliverAt", 0),
            last_error=v.get("lastError", ""),
            reason=v.get("reason", ""),
            dead_at_ms=v.get("deadAt", 0),
            sent_at_ms=v.get("sentAt", 0),
            cancelled_at_ms=v.get("cancelledAt", 0),
            broker=v.get("broker", ""),
            queue_id=v.get("queueId", 0),
            queue_offset=v.get("queueOffset", 0),
            msg_id=v.get("msgId", ""),
        )

    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext) -> pb.CancelResponse:
        async def compute() -> Answer:
            result = await self._sidecar.cancel(request.id)
            if result is CancelResult.NOT_FOUND:
                raise RequestError(
                    f"no scheduled message {problems.clip(request.id)}",
                    field="id",
                    status=404,
                    title="Not found",
                )
            if result is CancelResult.ALREADY_SENT:
                raise RequestError(
                    f"message {problems.clip(request.id)} was already sent",
                    field="id",
                    status=409,
                    title="Conflict",
                )
            return 200, {"id": request.id, "status": "CANCELLED"}

        await self._answered(context, "Cancel", "", b"", compute)
        return pb.CancelResponse(id=request.id, status=pb.CANCELLED)


async def add_health_and_reflection(server: grpc.aio.Server) -> health.aio.HealthServicer:
    """The standard grpc.health.v1 service (the whole server and rocksidecar.v1.Sidecar SERVING) and
    server reflection, so that grpcurl and grpc_health_probe work without the .proto file."""
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    sidecar = pb.DESCRIPTOR.services_by_name["Sidecar"].full_name
    for name in ("", sidecar):
        await checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (sidecar, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    return checker


def _ack(value: int) -> str:
    return "spool" if value == pb.ACK_SPOOL else "broker"
