"""Spans batched and exported over OTLP by the event loop itself, not by an export thread (issue 31).

Why: the SDK's ``BatchSpanProcessor`` exports from a thread of its own (encode, then the requests
library's POST). In CPython that thread takes the GIL from the event loop for every batch, and the loop
pays for each hand-off. With every request sampled, a sidecar under wrk x32 spent, per thread
(bench/RESULTS.md, session 17): the loop 156 us a message (86 with tracing off), the export thread 41 us
more. Here the loop encodes a batch (``otlp.encode_bytes``) and sends it between requests: over
``http/protobuf`` with the keep-alive client of app.http_client, over ``grpc`` (the sidecar's default)
with grpc.aio, the request's bytes as they are. No second thread, no GIL hand-offs, no requests library.

Taken by ``processor`` unless the configuration asks for what this does not do (client certificates or
a custom CA, a gRPC credential provider): then None, and the SDK's processor and exporter as before.
The same ``OTEL_*`` variables configure it as they configure the SDK's: the endpoint
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; else ``OTEL_EXPORTER_OTLP_ENDPOINT``, + ``/v1/traces`` over
HTTP), ``OTEL_EXPORTER_OTLP_INSECURE`` for gRPC (the SDK's rule), headers, timeout (seconds, as the
Python SDK reads it), compression (``gzip``, ``deflate``, ``none``), and the batching
(``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_BSP_MAX_QUEUE_SIZE``, ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``,
``OTEL_BSP_EXPORT_TIMEOUT``, in milliseconds). A value that is not a number in range is refused with one
line naming the variable (the SDK would warn and use its default), whichever exporter then serves; so is
a protocol other than ``grpc`` and ``http/protobuf`` (the SDK's exporter would take it for gRPC).

Behaviour kept from the SDK's processor: spans queue up to the queue's size (more are dropped and counted,
as the SDK drops them; a request's receive span that keeps its send, app.tracing.fast, is one entry of the
queue for two spans, and counts two in a batch's size and in every count); a full batch is exported at
once, a partial one after the schedule delay; one export at a time; an export that fails for a reason
worth repeating (no connection, HTTP 408, 429, 502-504, the gRPC codes the SDK's exporter retries) is
tried again with exponential back-off until its timeout, then dropped; an export never raises into the
code that ends spans. ``shutdown`` exports what is still queued (the sidecar calls it after its loop has
stopped: the rest goes out on a loop of its own).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import threading
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

import grpc
import grpc.aio
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.util.re import parse_env_headers

from rocksidecar.rmq.throttle import Throttle

from ..http_client import HttpClient, PostError
from .fast import FastSpan
from .otlp import encode_bytes

log = logging.getLogger(__name__)
_get_ident = threading.get_ident
Ended = ReadableSpan | FastSpan  # what the queue holds: an SDK span, or app.tracing.fast's


class Batch(NamedTuple):
    """Entries taken from the queue for one export, and the spans they hold (``_spans``)."""

    entries: list[Ended]
    spans: int


_RETRYABLE = frozenset({408, 429, 502, 503, 504})
_FIRST_BACKOFF_S = 1.0  # then 2, 4, ... while the export's timeout allows
_ENCODINGS = {"gzip": "gzip", "deflate": "deflate", "none": None, "": None}
# Variables that ask for TLS material this client does not load: the SDK's exporter takes those
_TLS_SETTINGS = ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")
_GRPC_CREDENTIALS = "OTEL_PYTHON_EXPORTER_OTLP_GRPC_CREDENTIAL_PROVIDER"
_GRPC_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# the SDK's gRPC exporter's codes worth another try
_GRPC_RETRYABLE = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


@dataclass(frozen=True)
class ExportSettings:
    protocol: str  # http/protobuf or grpc
    endpoint: str  # http(s)://host:port/path; for gRPC the target host:port
    headers: Mapping[str, str]
    timeout_s: float
    compression: str | None
    schedule_delay_s: float
    max_queue: int
    max_batch: int
    export_timeout_s: float
    insecure: bool = True  # gRPC: a plain-text channel (else TLS with the system's roots)


def _env(env: Mapping[str, str], name: str) -> str | None:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>`` (the spec's order)."""
    value = env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
    return value if value is not None else env.get(f"OTEL_EXPORTER_OTLP_{name}")


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {raw[:40]!r}") from None
    if not low <= value <= high:  # also refuses nan
        raise ValueError(f"{name} must be between {low:g} and {high:g}, not {raw[:40]!r}")
    return value


def protocol(env: Mapping[str, str]) -> str:
    """The OTLP protocol ``env`` asks for; gRPC unless it says otherwise (the sidecar's default).

    Raises:
        ValueError: another protocol than grpc or http/protobuf (one line naming the variable). A typo
            must not export over gRPC to where no collector listens; http/json is OTLP too, but neither
            this client nor app.tracing.otlp's exporters speak it.
    """
    name = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"  # the spec's order, as _env
    if env.get(name) is None:
        name = "OTEL_EXPORTER_OTLP_PROTOCOL"
    asked = env.get(name) or "grpc"
    if asked not in ("grpc", "http/protobuf"):
        raise ValueError(f"{name} must be grpc or http/protobuf, not {asked[:40]!r}")
    return asked


def settings(env: Mapping[str, str]) -> ExportSettings | None:
    """The loop exporter's settings from ``env``, or None where the SDK's exporter must serve: TLS files
    to load, or a gRPC credential provider.

    Raises:
        ValueError: a variable out of range or not understood (one line naming it). The protocol, the
            numbers and the compression are checked before the SDK's exporter is chosen: it reads the
            same variables, and would log a traceback and go on with its default.
    """
    asked = protocol(env)
    compression = (_env(env, "COMPRESSION") or "").strip().lower()
    if compression not in _ENCODINGS:
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_COMPRESSION must be gzip, deflate or none, not {compression[:40]!r}"
        )
    timeout_var = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
    if env.get(timeout_var) is None:
        timeout_var = "OTEL_EXPORTER_OTLP_TIMEOUT"
    timeout_s = _number(env, timeout_var, 10.0, 0.001, 3600.0)
    schedule_delay_s = _number(env, "OTEL_BSP_SCHEDULE_DELAY", 5000, 1, 3_600_000) / 1000
    max_queue = int(_number(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, 1 << 20))
    max_batch = min(int(_number(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1, 1 << 20)), max_queue)
    export_timeout_s = _number(env, "OTEL_BSP_EXPORT_TIMEOUT", 30000, 1, 3_600_000) / 1000
    if any(_env(env, s) for s in _TLS_SETTINGS) or (asked == "grpc" and env.get(_GRPC_CREDENTIALS)):
        return None
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    insecure = True
    if asked == "grpc":
        endpoint = endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4317"
        parts = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
        said = _env(env, "INSECURE")
        # the SDK's rule: https is TLS; else OTEL_EXPORTER_OTLP_INSECURE when set; else http is plain
        insecure = parts.scheme != "https" and (
            said.strip().lower() == "true" if said else parts.scheme == "http"
        )
        endpoint = parts.netloc or endpoint
        if not endpoint or "/" in endpoint:
            raise ValueError(f"OTEL_EXPORTER_OTLP_ENDPOINT must be host:port or a URL, not {endpoint[:80]!r}")
    else:
        if not endpoint:
            base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
            endpoint = base.rstrip("/") + "/v1/traces"
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(
                f"OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, not {endpoint[:80]!r}"
            )
    headers = parse_env_headers(_env(env, "HEADERS") or "", liberal=True)
    for key, value in headers.items():
        if any(c in key + value for c in "\r\n"):
            raise ValueError("OTEL_EXPORTER_OTLP_HEADERS: a header carries a line break")
    return ExportSettings(
        protocol=asked,
        endpoint=endpoint,
        headers=headers,
        timeout_s=timeout_s,
        compression=_ENCODINGS[compression],
        schedule_delay_s=schedule_delay_s,
        max_queue=max_queue,
        max_batch=max_batch,
        export_timeout_s=export_timeout_s,
        insecure=insecure,
    )


class Transport(Protocol):
    """One OTLP request sent: None when the collector took it, else why not and whether another try
    may succeed. Made on, and used from, one event loop."""

    async def send(self, body: bytes, timeout_s: float) -> tuple[str, bool] | None: ...

    async def close(self) -> None: ...


class HttpTransport:
    """OTLP/HTTP: a POST of the protobuf request by app.http_client (keep-alive, one loop)."""

    def __init__(self, config: ExportSettings) -> None:
        self._config = config
        self._client = HttpClient()
        lines = b"content-type: application/x-protobuf\r\n" + b"".join(
            f"{k}: {v}\r\n".encode("latin-1", "replace") for k, v in config.headers.items()
        )
        if config.compression:
            lines += f"content-encoding: {config.compression}\r\n".encode()
        self._lines = lines

    async def send(self, body: bytes, timeout_s: float) -> tuple[str, bool] | None:
        if self._config.compression == "gzip":
            body = gzip.compress(body, 6)
        elif self._config.compression == "deflate":
            body = zlib.compress(body, 6)
        try:
            answer = await self._client.post_lines(self._config.endpoint, self._lines, body, timeout_s)
        except PostError as error:
            return str(error), True
        if 200 <= answer.status < 300:
            return None
        return f"HTTP {answer.status}", answer.status in _RETRYABLE

    async def close(self) -> None:
        await self._client.close()


class GrpcTransport:
    """OTLP/gRPC: the TraceService's Export by grpc.aio on the loop, the request's bytes sent as they
    are (otlp.encode_bytes made them; no protobuf message built)."""

    def __init__(self, config: ExportSettings) -> None:
        self._config = config
        self._channel: grpc.aio.Channel | None = None
        self._export: Any = None
        self._metadata = tuple((k.lower(), v) for k, v in config.headers.items())
        compression = {"gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}
        self._compression = compression.get(config.compression or "", grpc.Compression.NoCompression)

    async def send(self, body: bytes, timeout_s: float) -> tuple[str, bool] | None:
        if self._channel is None:  # made on the loop that uses it
            target = self._config.endpoint
            if self._config.insecure:
                self._channel = grpc.aio.insecure_channel(target, compression=self._compression)
            else:
                credentials = grpc.ssl_channel_credentials()
                self._channel = grpc.aio.secure_channel(target, credentials, compression=self._compression)
            self._export = self._channel.unary_unary(
                _GRPC_EXPORT, request_serializer=None, response_deserializer=None
            )
        try:
            await self._export(body, timeout=timeout_s, metadata=self._metadata)
        except grpc.aio.AioRpcError as error:
            code = error.code()
            return f"gRPC {code.name}: {(error.details() or '')[:200]}", code in _GRPC_RETRYABLE
        return None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def transport(config: ExportSettings) -> Transport:
    return GrpcTransport(config) if config.protocol == "grpc" else HttpTransport(config)


class LoopBatchProcessor(SpanProcessor):
    """The SDK's batching processor's contract, run by the event loop of the spans' code (see the
    module's doc). Bound to the first loop that ends a span; spans ended by another thread are handed
    to that loop."""

    def __init__(self, config: ExportSettings) -> None:
        self.config = config
        self._transport = transport(config)
        self._queue: deque[Ended] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._exporting: asyncio.Task[None] | None = None
        self._inflight: Batch | None = None  # the batch with the collector: back to the queue if cut short
        self._closed = False
        self._closing_by: float | None = None  # shutdown on the running loop: its one deadline (loop time)
        self._throttle = Throttle(window_s=60.0)
        self.dropped = 0  # spans the full queue turned away
        self.exported = 0  # spans a collector took
        self.failed = 0  # spans of exports given up

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        # recorded, not sampled (RECORD_ONLY): not exported. The flags by position (a SpanContext is
        # a tuple): three properties a span otherwise
        if not span.get_span_context()[3] & 1:  # type: ignore[index]
            return
        self.on_end_sampled(span)

    def on_end_sampled(self, span: Ended) -> None:
        """``on_end`` of a span known to be sampled (app.tracing.fast's, which this processor alone
        reads: no flags to read back)."""
        if self._thread != _get_ident():
            self._from_elsewhere(span)
            return
        queue = self._queue
        if len(queue) >= self.config.max_queue:
            self._drop(_spans(span))
            return
        queue.append(span)
        if self._exporting is None:
            if len(queue) >= self.config.max_batch:
                self._export_now()
            elif self._timer is None:
                self._timer = self._loop.call_later(self.config.schedule_delay_s, self._export_now)  # type: ignore[union-attr]

    def _from_elsewhere(self, span: Ended) -> None:
        """A span ended off the bound loop's thread: the loop running here binds us if none is bound
        yet; else the span goes to the bound loop; with no loop at all it waits in the queue (for the
        loop that binds us, or ``shutdown``)."""
        if self._closed:
            self._drop(_spans(span))
            return
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._keep(span)
                return
            self._thread = threading.get_ident()
            self.on_end_sampled(span)
            return
        try:
            self._loop.call_soon_threadsafe(self.on_end_sampled, span)
        except RuntimeError:  # that loop is closed: shutdown exports what is queued
            self._keep(span)

    def _keep(self, span: Ended) -> None:
        """``span`` queued with no loop to hand it to (none bound yet, or closed): within the bound, as
        on the loop (deque.append is atomic)."""
        if len(self._queue) >= self.config.max_queue:
            self._drop(_spans(span))
        else:
            self._queue.append(span)

    def _drop(self, n: int) -> None:
        self.dropped += n
        held = self._throttle.allow(("dropped",))
        if held is not None:
            log.warning(
                "span export queue full (%d): %d spans dropped so far", self.config.max_queue, self.dropped
            )

    def _export_now(self) -> None:
        self._timer = None
        if self._exporting is None and self._queue and self._loop is not None:
            self._exporting = self._loop.create_task(self._export())

    async def _export(self) -> None:
        """Full batches while there are some, then the rest once the schedule delay has passed. Once
        shutdown was called on this loop, all that is queued, by its deadline: no timer is armed after
        it to send a partial batch."""
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                if self._closing_by is not None:
                    await self._send_queue(self._closing_by)
                    break
                await self._send(self._take(), loop.time() + self.config.export_timeout_s)
                if len(self._queue) < self.config.max_batch and self._closing_by is None:
                    break
        finally:
            self._release()

    def _release(self) -> None:
        """The export slot given back: what is still queued waits for the schedule delay."""
        self._exporting = None
        if self._queue and self._timer is None and not self._closed and self._loop is not None:
            self._timer = self._loop.call_later(self.config.schedule_delay_s, self._export_now)

    def _take(self) -> Batch:
        """A batch of at most max_batch spans (a FastSpan that keeps its request's send holds two), and
        how many spans it holds."""
        queue = self._queue
        batch: list[Ended] = []
        room = full = self.config.max_batch
        while queue and room > 0:
            span = queue.popleft()
            batch.append(span)
            room -= _spans(span)
        return Batch(batch, full - room)

    async def _send_queue(self, deadline: float) -> None:
        """All that is queued, batch by batch, by one ``deadline`` in all (a batch each with an export
        timeout of its own held a stop (queue / batch) x that timeout with a collector down; the SDK's
        shutdown gives up after one). Once it has passed, a shutdown counts the rest failed; a flush
        leaves it queued."""
        loop = asyncio.get_running_loop()
        while self._queue and loop.time() < deadline:
            await self._send(self._take(), deadline)
        if self._closed and self._queue:
            entries = list(self._queue)
            self._queue.clear()
            self._failed(Batch(entries, sum(map(_spans, entries))), "shutdown's export timeout passed")

    async def _send(self, taken: Batch, deadline: float) -> None:
        """One batch to the collector, tried again while that is worth it and time is left before
        ``deadline`` (loop time). Never raises but for a cancellation, which puts the batch back at the
        queue's head: the loop's end cancels an export under way, and shutdown sends what is queued."""
        batch = taken.entries
        try:
            body = encode_bytes(batch)
        except Exception as error:  # the SDK's rule: a batch that cannot be encoded is dropped, logged
            self._failed(taken, f"cannot encode: {type(error).__name__}: {error}")
            return
        self._inflight = taken
        try:
            await self._tries(taken, body, deadline)
        except asyncio.CancelledError:
            if self._inflight is taken:
                self._requeue_inflight()
            raise
        # not in a finally: a coroutine closed with its loop (GeneratorExit) leaves it for _flush
        if self._inflight is taken:
            self._inflight = None

    async def _tries(self, taken: Batch, body: bytes, deadline: float) -> None:
        """``body`` sent until the collector takes it, or refuses it for good, or ``deadline`` is too
        near for another try; the batch counted either way."""
        loop = asyncio.get_running_loop()
        backoff = _FIRST_BACKOFF_S
        while True:
            left = deadline - loop.time()
            try:
                refused = await self._transport.send(body, max(0.001, min(self.config.timeout_s, left)))
            except Exception as error:  # a transport's own bug: logged with the batch, the exports go on
                self._failed(taken, f"{type(error).__name__}: {error}")
                return
            if refused is None:
                self.exported += taken.spans
                return
            why, again = refused
            if not again or deadline - loop.time() <= backoff:
                self._failed(taken, why)
                return
            await asyncio.sleep(backoff)
            backoff *= 2

    def _requeue_inflight(self) -> None:
        """The batch cut short back at the queue's head, in its order (the queue may pass its bound by
        it: these spans were taken in before)."""
        taken, self._inflight = self._inflight, None
        if taken is not None:
            self._queue.extendleft(reversed(taken.entries))

    def _failed(self, taken: Batch, why: str) -> None:
        self.failed += taken.spans
        held = self._throttle.allow(("failed", why[:200]))
        if held is not None:
            log.warning(
                "span export to %s failed, %d spans dropped: %s%s", self.config.endpoint, taken.spans,
                why[:500], f" ({held} more failed exports since the last line)" if held else "",
            )  # fmt: skip

    def shutdown(self) -> None:
        """Stop taking spans and export what is queued: on the bound loop when it is still running
        (scheduled, not waited for: this is a synchronous call), else on a loop of its own."""
        if self._closed:
            return
        self._closed = True
        self._flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._flush()

    def _flush(self) -> bool:
        loop = self._loop
        if loop is not None and loop.is_running():
            if self._thread == threading.get_ident():
                if self._timer is not None:
                    self._timer.cancel()
                if self._closed and self._closing_by is None:  # the export drains the queue by then
                    self._closing_by = loop.time() + self.config.export_timeout_s
                self._export_now()  # what the running loop can do without blocking itself
                return True
            done = asyncio.run_coroutine_threadsafe(self._drain(), loop)
            try:
                done.result(self.config.export_timeout_s)
            except Exception:  # a flush answers whether it finished, it does not raise
                return False
            return True
        if loop is not None and loop.is_closed():
            # an export its loop never cancelled (closed with the task pending): its batch goes first
            self._requeue_inflight()
        if not self._queue:
            return True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        asyncio.run(self._drain_fresh())
        return not self._queue

    async def _drain(self) -> None:
        """A flush from another thread, on the loop: it takes the one export slot like any export
        (waits for the one under way, then holds it). Beside another export, both batches would be
        in flight and only one of them in ``_inflight``: the loop's end would lose the other."""
        deadline = asyncio.get_running_loop().time() + self.config.export_timeout_s
        while self._exporting is not None:  # another flush may take it first: wait again
            await asyncio.wait((self._exporting,))  # not cancelled with us, nor raising its end
        self._exporting = asyncio.current_task()
        try:
            await self._send_queue(deadline)
        finally:
            self._release()

    async def _drain_fresh(self) -> None:
        """The queue's rest exported from a loop of our own (the spans' loop has stopped): a client of
        its own too, since connections belong to the loop they were made on."""
        self._transport, old = transport(self.config), self._transport
        self._exporting = None
        try:
            await self._send_queue(asyncio.get_running_loop().time() + self.config.export_timeout_s)
        finally:
            await self._transport.close()
            self._transport = old


def _spans(span: Ended) -> int:
    """The spans an entry of the queue stands for: two for a FastSpan that keeps its request's send."""
    return 2 if type(span) is FastSpan and span._sent is not None else 1


def processor(env: Mapping[str, str]) -> LoopBatchProcessor | None:
    """A LoopBatchProcessor for ``env``'s configuration, or None where the SDK's must serve (see
    ``settings``). Raises ValueError for a variable it cannot use."""
    config = settings(env)
    return None if config is None else LoopBatchProcessor(config)
