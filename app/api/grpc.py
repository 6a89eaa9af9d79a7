"""The gRPC API (grpc.aio): the HTTP API's operations with the same validation and statuses.

Errors end the call with a gRPC code mapped from the HTTP status, the problem's detail as the message,
and trailing metadata ``field`` and ``http-status``. Publish acknowledges each streamed message once it
is stored, by the sequence number the client gave it (app.api.grpc_publish).
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import astuple
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from prometheus_client import Counter

from ..idempotency import Answer, KeyRefused, answer_once, damaged_answer, fingerprint
from ..request import GRPC_FIELDS, HTTP_FIELDS, RequestError
from ..subscriptions.stream import StreamHub
from ..tracing.context import TraceContext, from_headers
from . import grpc_subscribe, problems
from .grpc_edge import WireBounds, cut_short
from .grpc_health import EndingHealth
from .grpc_intercept import WrappingServer
from .grpc_publish import BatchCombiner, PublishStreams, StreamPublisher
from .grpc_transactions import TransactionRpcs, enabled
from .grpc_views import (
    ACK_MODES,
    batch_response,
    batch_specs,
    message_status,
    send_response,
    spec_from_proto,
    unknown_ack,
    unknown_field,
    unknown_in_request,
)
from .guards import Guards
from .middleware import CLIENT_CLOSED
from .operations import EdgeDeps, Operations, item_label
from .parsing import check_batch_size
from .proto import rocksidecar_pb2 as pb
from .proto import rocksidecar_pb2_grpc as pb_grpc

_R = TypeVar("_R", bound=ProtoMessage)  # the response message an RPC answers

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
REPLAYED_METADATA = "idempotent-replayed"  # "true" on an answer repeated for an idempotency_key
# What an error's trailers carry of it, within what any client takes (grpc's default metadata limit is
# 8 KiB; the message is percent-encoded, up to 12 bytes a character): both may echo a client's input.
MAX_FIELD_CHARS = 256
MAX_DETAIL_CHARS = 500
# How a Publish stream open when the sidecar stops ends (its messages read so far sent and answered).
_STOPPING = problems.problem(
    503, "Service Unavailable", "the sidecar is stopping: send the messages not acknowledged again", ""
)


def trace_of(context: grpc.aio.ServicerContext) -> TraceContext | None:
    """The call's W3C trace context from its ``traceparent``/``tracestate`` metadata (the first of each,
    as HTTP takes the first header); an invalid one is ignored."""
    parent = state = None
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent" and parent is None and isinstance(value, str):
            parent = value
        elif key == "tracestate" and state is None and isinstance(value, str):
            state = value
    return None if parent is None else from_headers(parent, state)


def header_safe(text: str) -> str:
    """``text`` as a metadata value may carry it (printable ASCII): other characters escaped as Python
    writes them (``\\x01``, ``\\u043a``), as a property's name may hold them."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in text)


def _kept(response: ProtoMessage, failed: int = 0) -> dict[str, Any]:
    """A successful answer as the idempotency store keeps it: the response's wire bytes (``failed``
    items make it an answer that a retry could improve, so it is not kept)."""
    return {"proto": base64.b64encode(response.SerializeToString()).decode(), "failed": failed}


# Before b4b0005 (2026-11-23) a keyed Send's or SendBatch's answer was kept as the HTTP API's JSON view
# (200 SENT, 202 SPOOLED or SCHEDULED; a batch's refused items with HTTP's field names), not as _kept's
# wire bytes: such answers stay in the store for the idempotency window (24 h by default), and their
# retries after the upgrade get the response rebuilt as that version mapped it (_legacy_send,
# _legacy_batch). Remove these once every sidecar has run b4b0005 or later for the window.
_LEGACY_NAMES = dict(zip(astuple(HTTP_FIELDS), astuple(GRPC_FIELDS), strict=True))  # "delayMs": "delay_ms"
_LEGACY_NAME = re.compile(r"\b(" + "|".join(map(re.escape, _LEGACY_NAMES)) + r")\b")


def _legacy_name(text: str | None) -> str:
    """A kept error's field or detail with HTTP's field names in gRPC's (``delayMs``: ``delay_ms``)."""
    return _LEGACY_NAME.sub(lambda m: _LEGACY_NAMES[m.group(1)], text) if text else ""


def _legacy_send(view: dict[str, Any]) -> pb.SendResponse:
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


def _legacy_batch(view: dict[str, Any]) -> pb.SendBatchResponse:
    def error(body: dict[str, Any]) -> pb.Error:
        return pb.Error(
            http_status=body["status"],
            title=body["title"],
            detail=_legacy_name(body["detail"]),
            field=_legacy_name(body.get("field")),
        )

    return pb.SendBatchResponse(
        results=[
            pb.BatchItem(index=item["index"], error=error(item["error"]))
            if "error" in item
            else pb.BatchItem(index=item["index"], result=_legacy_send(item))
            for item in view["results"]
        ]
    )


# What a kept answer that is neither form raises as it is rebuilt (bit rot, a hand edit): a "damaged
# answer" (INTERNAL, as HTTP's 500), not an exception escaping the handler (UNKNOWN, unexplained).
_UNDECODABLE = (AttributeError, DecodeError, KeyError, TypeError, ValueError)  # binascii.Error: a ValueError


def _decoded(
    body: dict[str, Any], response_type: type[_R], legacy: Callable[[dict[str, Any]], _R] | None
) -> _R:
    """The response a kept answer holds: today's wire bytes, else the earlier version's JSON view
    (``legacy``; None: a method that kept none). Raises one of _UNDECODABLE when it holds neither."""
    if "proto" not in body and legacy is not None:
        return legacy(body)
    response: _R = response_type.FromString(base64.b64decode(body["proto"], validate=True))  # stubs: Any
    return response


class SidecarServicer(pb_grpc.SidecarServicer):
    def __init__(
        self,
        deps: EdgeDeps,
        *,
        auth_token: str = "",
        hubs: Mapping[str, StreamHub] | None = None,
        transactions: TransactionRpcs | None = None,
    ) -> None:
        self._hubs = dict(hubs or {})  # gRPC subscriptions by name (Subscribe, Ack)
        self._transactions = transactions  # None: the transaction RPCs answer UNIMPLEMENTED
        self._ops = Operations.of(deps, GRPC_FIELDS)
        self._metrics = deps.metrics
        self._idempotency = deps.idempotency
        self._guards = Guards.of(auth_token)
        self._ok: dict[str, Counter] = {}  # by method: only the service's own names
        self._send_ok = self._answered_ok("Send")  # the hot path's, read once per call
        self._combiner = BatchCombiner(self._ops)  # the Publish streams' batches, sent together
        self.publish_streams = PublishStreams()  # the open ones, ended by the server's stop (app.api.servers)
        # What a request may hold, counted before it is decoded (app.api.grpc_edge finds it here).
        self.wire_bounds = WireBounds(self._ops.batch_limit, self._ops.limits.max_body_bytes)

    # plumbing -----------------------------------------------------------------------------------
    def _answered_ok(self, method: str) -> Counter:
        """The request counter's child for ``method`` answered OK, made once (labels() takes a lock and
        builds a tuple on every call)."""
        child = self._ok.get(method)
        if child is None:
            child = self._ok[method] = self._metrics.requests.labels("grpc", method, "200")
        return child

    async def _refuse(self, context: grpc.aio.ServicerContext, exc: Exception, method: str) -> NoReturn:
        """End the call with the code mapped from what ``exc`` means at an API edge."""
        status, problem, _ = problems.from_exception(exc)
        await self._abort(context, status, problem, method)

    async def _rejected(self, context: grpc.aio.ServicerContext, exc: RequestError, method: str) -> NoReturn:
        """Refuse a request that sends messages for its own bad input (a field this API does not define,
        an unknown ack, a batch's size), counted as a rejected message as HTTP counts it. Checked before
        its idempotency key is looked at, as HTTP parses a request first: the refusal is not kept, so the
        request corrected may come again under the same key."""
        self._ops.count("REJECTED")
        await self._refuse(context, exc, method)

    async def _abort(
        self, context: grpc.aio.ServicerContext, status: int, body: dict[str, Any], method: str
    ) -> NoReturn:
        self._metrics.requests.labels("grpc", method, str(status)).inc()
        field = header_safe((body.get("field") or "")[:MAX_FIELD_CHARS])[:MAX_FIELD_CHARS]
        context.set_trailing_metadata((("field", field), ("http-status", str(status))))
        detail: str = body["detail"]
        if len(detail) > MAX_DETAIL_CHARS:
            detail = f"{detail[:MAX_DETAIL_CHARS]}... ({len(detail)} characters)"
        await context.abort(_CODES.get(status, grpc.StatusCode.INTERNAL), detail)
        raise AssertionError("abort returns only by raising")  # pragma: no cover

    async def _check_auth(self, context: grpc.aio.ServicerContext, method: str) -> None:
        if not self._guards.auth_token:
            return  # no token set: the call's metadata need not be read
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
        request: ProtoMessage | None,
        key: str,
        compute: Callable[[], Awaitable[_R | tuple[_R, int]]],
        response_type: type[_R],
        *,
        messages: bool = False,
        authorized: bool = False,
        legacy: Callable[[dict[str, Any]], _R] | None = None,
    ) -> _R:
        """The response ``compute`` builds (through the idempotency store when a key is given, ""
        meaning none: proto3 has no absence); abort with the mapped code on an error. ``messages``: the
        call sends messages, so one refused for its key is counted REJECTED, as other bad input is (and
        as HTTP's message routes count it). ``authorized``: the caller has checked the call's
        authorization (before checking its request). ``legacy``: the response from the JSON view an
        earlier version kept for this method (see _legacy_send)."""
        if not authorized:
            await self._check_auth(context, method)
        try:
            if not key or self._idempotency is None:  # nothing to keep: the response as it was built
                try:
                    built = await compute()
                except Exception as exc:
                    await self._refuse(context, exc, method)
                self._answered_ok(method).inc()
                response: _R = built[0] if isinstance(built, tuple) else built
                return response

            async def kept() -> Answer:
                try:
                    built = await compute()
                except Exception as exc:  # a refusal is an answer too, kept like HTTP's problem documents
                    status, problem, _ = problems.from_exception(exc)
                    return status, problem
                response, failed = built if isinstance(built, tuple) else (built, 0)
                return 200, _kept(response, failed)

            async def request_fingerprint() -> str:
                # serialized deterministically: map entries in key order
                data = request.SerializeToString(deterministic=True) if request is not None else b""
                return fingerprint(f"/grpc/{method}", "", data)

            try:
                (status, body), replayed = await answer_once(
                    self._idempotency, key, request_fingerprint, kept, field=GRPC_FIELDS.idempotency_key
                )
            except Exception as exc:
                if messages and isinstance(exc, KeyRefused):
                    self._ops.count("REJECTED")
                (status, body, _), replayed = problems.from_exception(exc), False
            if status < 400:
                try:
                    kept_response = _decoded(body, response_type, legacy)
                except _UNDECODABLE:
                    damaged = damaged_answer(GRPC_FIELDS.idempotency_key)
                    (status, body, _), replayed = problems.from_exception(damaged), False
            if replayed:  # a kept refusal too, as HTTP marks a replayed problem: sent before the abort
                await context.send_initial_metadata(((REPLAYED_METADATA, "true"),))
            if status >= 400:
                await self._abort(context, status, body, method)
            self._answered_ok(method).inc()
            return kept_response
        except asyncio.CancelledError:
            self._client_gone(method)
            raise

    def _client_gone(self, method: str) -> None:
        """Count a call whose client went away (a deadline, a cancel, a disconnect: grpc.aio cancels its
        handler) before its answer, as HTTP counts one (README: code 499)."""
        self._metrics.requests.labels("grpc", method, str(CLIENT_CLOSED)).inc()

    # RPCs ---------------------------------------------------------------------------------------
    async def Send(self, request: pb.SendRequest, context: grpc.aio.ServicerContext) -> pb.SendResponse:
        if self._guards.auth_token:
            await self._check_auth(context, "Send")
        # The request's own checks, before its key (see _rejected); the message's are ops.send's.
        if (wrong := unknown_in_request(request)) is not None:
            await self._rejected(context, wrong, "Send")
        ack = ACK_MODES.get(request.ack)
        if ack is None:
            await self._rejected(context, unknown_ack(request.ack), "Send")
        if request.idempotency_key and self._idempotency is not None:

            async def compute() -> pb.SendResponse:
                return send_response(
                    await self._ops.send(spec_from_proto(request.message), ack, trace_of(context))
                )

            return await self._answered(
                context,
                "Send",
                request,
                request.idempotency_key,
                compute,
                pb.SendResponse,
                messages=True,
                authorized=True,
                legacy=_legacy_send,
            )
        # The hot path (no answer to keep): _answered's no-key branch without its closure and coroutines.
        try:
            outcome = await self._ops.send(spec_from_proto(request.message), ack, trace_of(context))
        except Exception as exc:
            await self._refuse(context, exc, "Send")
        except asyncio.CancelledError:  # costs the answered call nothing: an except clause more
            self._client_gone("Send")
            raise
        self._send_ok.inc()
        return send_response(outcome)

    async def SendBatch(
        self, request: pb.SendBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendBatchResponse:
        await self._check_auth(context, "SendBatch")
        # The request's own checks, before its key (see _rejected); each message's are ops.send_batch's.
        messages = request.messages
        mode = ACK_MODES.get(request.ack)
        try:
            check_batch_size(len(messages), self._ops.batch_limit)  # before reading millions of them
            wrong = unknown_field(request)  # its messages' fail only themselves (batch_specs)
            if wrong is not None:
                raise wrong
            if mode is None:
                raise unknown_ack(request.ack)
        except RequestError as exc:
            await self._rejected(context, exc, "SendBatch")
        ack = mode  # an Ack: the checks above refused None

        async def compute() -> tuple[pb.SendBatchResponse, int]:
            results = await self._ops.send_batch(batch_specs(messages), ack, trace_of(context))
            failed = sum(item_label(r) == "FAILED" for r in results)
            return batch_response(results), failed

        return await self._answered(
            context,
            "SendBatch",
            request,
            request.idempotency_key,
            compute,
            pb.SendBatchResponse,
            messages=True,
            authorized=True,
            legacy=_legacy_batch,
        )

    async def Publish(
        self, request_iterator: AsyncIterator[pb.PublishRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.PublishAck]:
        await self._check_auth(context, "Publish")
        publisher = StreamPublisher(self._ops, trace_of(context), PUBLISH_IN_FLIGHT, self._combiner)
        try:
            with self.publish_streams.open(publisher):
                async for ack in publisher.run(request_iterator):
                    yield ack
        except asyncio.CancelledError:
            self._client_gone("Publish")  # cancelled or gone before it ended its side: 499, as Send
            raise
        if publisher.stopped:
            # The server stopped reading the stream before its client ended it: messages it sent after
            # the last one read were never taken. UNAVAILABLE, not OK: an OK end says the stream is done,
            # while UNAVAILABLE is what clients' retry logic (and grpc's retry policies) take as "try
            # again, here or elsewhere": it opens a new stream and sends what was not acknowledged.
            await self._abort(context, 503, _STOPPING, "Publish")
        if not cut_short(request_iterator):  # a malformed message ends the call: counted as its refusal
            self._answered_ok("Publish").inc()

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Delivery]:
        await self._check_auth(context, "Subscribe")
        try:
            hub = grpc_subscribe.hub_for(self._hubs, request.subscription)
        except RequestError as exc:
            status, body, _ = problems.from_exception(exc)
            await self._abort(context, status, body, "Subscribe")
        self._answered_ok("Subscribe").inc()
        async for delivery in grpc_subscribe.stream(hub):
            yield delivery

    async def Ack(self, request: pb.AckRequest, context: grpc.aio.ServicerContext) -> pb.AckResponse:
        async def compute() -> pb.AckResponse:
            grpc_subscribe.ack(self._hubs, request)
            return pb.AckResponse()

        return await self._answered(context, "Ack", None, "", compute, pb.AckResponse)

    async def GetMessage(
        self, request: pb.GetMessageRequest, context: grpc.aio.ServicerContext
    ) -> pb.MessageStatus:
        async def compute() -> pb.MessageStatus:
            return message_status(await self._ops.status(request.id))

        return await self._answered(context, "GetMessage", None, "", compute, pb.MessageStatus)

    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext) -> pb.CancelResponse:
        async def compute() -> pb.CancelResponse:
            await self._ops.cancel(request.id)
            return pb.CancelResponse(id=request.id, status=pb.CANCELLED)

        return await self._answered(context, "Cancel", None, "", compute, pb.CancelResponse)

    async def BeginTransaction(
        self, request: pb.BeginTransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Transaction:
        await self._check_auth(context, "BeginTransaction")
        # Before its key, as Send's (see _rejected), but not counted as a rejected message: a begin is not
        # one on either API (app.api.grpc_edge.SENDS_MESSAGES).
        if (wrong := unknown_in_request(request)) is not None:
            await self._refuse(context, wrong, "BeginTransaction")

        async def compute() -> pb.Transaction:
            return await enabled(self._transactions).begin(request)

        return await self._answered(
            context,
            "BeginTransaction",
            request,
            request.idempotency_key,
            compute,
            pb.Transaction,
            authorized=True,
        )

    async def _decide(self, context: grpc.aio.ServicerContext, tx_id: str, commit: bool) -> pb.Transaction:
        async def compute() -> pb.Transaction:
            return await enabled(self._transactions).decide(tx_id, commit)

        method = "CommitTransaction" if commit else "RollbackTransaction"
        return await self._answered(context, method, None, "", compute, pb.Transaction)

    async def CommitTransaction(
        self, request: pb.TransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Transaction:
        return await self._decide(context, request.id, True)

    async def RollbackTransaction(
        self, request: pb.TransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Transaction:
        return await self._decide(context, request.id, False)

    async def GetTransaction(
        self, request: pb.TransactionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Transaction:
        async def compute() -> pb.Transaction:
            return await enabled(self._transactions).get(request.id)

        return await self._answered(context, "GetTransaction", None, "", compute, pb.Transaction)


async def add_health_and_reflection(server: WrappingServer) -> health.aio.HealthServicer:
    """The standard grpc.health.v1 service (the whole server and rocksidecar.v1.Sidecar SERVING) and
    server reflection, so that grpcurl and grpc_health_probe work without the .proto file."""
    checker = EndingHealth()  # its Watch streams end when the server stops
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    sidecar = pb.DESCRIPTOR.services_by_name["Sidecar"].full_name
    for name in ("", sidecar):
        await checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    names = (sidecar, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME)
    # grpc.aio's reflection servicer by name: enable_server_reflection picks it only for a grpc.aio.Server
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(names), server
    )
    return checker
