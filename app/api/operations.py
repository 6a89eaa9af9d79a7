"""The sidecar's operations as both API edges call them, on domain values.

Each edge turns its input into a ``MessageFields`` (the HTTP model as it is, or ``spec_from_proto``), calls
these, and maps the domain result (``Outcome``, ``MessageState``) or the error into its own answer with
its own field names. Validation, limits, outcome metrics and the not-found/conflict rules live here once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from rocksidecar.delay import CancelOutcome
from rocksidecar.rmq import Message, new_uniq_ids

from ..idempotency import IdempotencyStore
from ..metrics import Metrics
from ..request import (
    FieldNames,
    Limits,
    MessageFields,
    MessageSpec,
    Prepared,
    RequestError,
    prepare,
    prepare_plain,
)
from ..sidecar import SENT, Ack, AllSent, MessageState, Outcome, Sidecar
from ..tracing import spans
from ..tracing.context import TraceContext, inherit
from . import problems
from .parsing import PlainBatch, check_batch_size

BatchItem = Outcome | Exception
_SPECS = frozenset({MessageFields, MessageSpec})  # the types of a parsed batch item (not an error)


def item_label(item: BatchItem) -> str:
    """How a batch item is counted and reported: the state of a stored message, else REJECTED (bad
    input, 4xx) or FAILED (could not be stored, 5xx)."""
    if isinstance(item, Outcome):
        status = item.status
        return "SENT" if status is SENT else status.value  # Enum.value is a slow property
    return "REJECTED" if problems.status_of(item) < 500 else "FAILED"


def send_status(outcome: Outcome) -> int:
    """The HTTP status of a stored message: 200 when a broker has it, 202 when the local store does."""
    return 200 if outcome.status is SENT else 202


def not_found(id: str) -> RequestError:
    return RequestError.not_found(
        f"no spooled, scheduled or dead-lettered message {problems.clip(id)}", field="id"
    )


@dataclass(frozen=True, slots=True)
class EdgeDeps:
    """What both API edges (HTTP and gRPC) are built from; assembly builds it once for both."""

    sidecar: Sidecar
    limits: Limits
    batch_limit: int
    metrics: Metrics
    idempotency: IdempotencyStore | None
    now_ms: Callable[[], int]  # the delay store's clock: due times are by it
    # How far now_ms runs ahead of the wall clock after a step back (DelayStore.lead_ms): added to a
    # deliverAt (a wall time), read only for one. None: deliverAt taken as a time of now_ms.
    lead_ms: Callable[[], int] | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class Operations(EdgeDeps):
    """The operations of one edge: its deps as flat fields (one attribute read each on the hot path)."""

    names: FieldNames  # the edge's spelling of the fields in its errors

    @classmethod
    def of(cls, deps: EdgeDeps, names: FieldNames) -> Operations:
        shared: dict[str, Any] = {f.name: getattr(deps, f.name) for f in fields(EdgeDeps)}
        return cls(**shared, names=names)

    def count(self, label: str, n: int = 1) -> None:
        if n:
            self.metrics.count_messages(label.lower(), n)

    def prepare(self, spec: MessageFields, now_ms: int | None = None) -> Prepared:
        now = self.now_ms() if now_ms is None else now_ms
        return prepare(spec, self.limits, now, self.names, lead_ms=self.lead_ms)

    async def send(self, spec: MessageFields, ack: Ack, trace: TraceContext | None = None) -> Outcome:
        """Validate and send one message (with the request's ``trace`` context unless it has its own),
        counted by its outcome; raises what refused it."""
        try:
            # self.prepare inline, the clock read only for a delayed message (prepare reads now_ms for
            # nothing else): two calls less a message (issue 32).
            delayed = spec.delay_ms is not None or spec.deliver_at is not None
            prepared = prepare(
                spec, self.limits, self.now_ms() if delayed else 0, self.names, None, self.lead_ms
            )
            if spans.ON:  # spans.receive's two steps taken here: no coroutine or lambda of its own
                prepared.message, span, held = spans.opened(prepared.message, trace)  # trace inherited
                try:
                    outcome = await self.sidecar.send(prepared, ack)
                except BaseException as exc:
                    spans.closed(span, held, exc=exc)
                    raise
                spans.closed(span, held, outcome)
            else:
                if trace is not None:
                    prepared.message = inherit(prepared.message, trace)
                outcome = await self.sidecar.send(prepared, ack)
        except Exception as exc:
            self.count(item_label(exc))
            raise
        if outcome.status is SENT:  # item_label and count for the usual outcome, without their calls
            self.metrics.count_messages("sent")
        else:
            self.count(item_label(outcome))
        return outcome

    async def send_batch(
        self,
        specs: Sequence[MessageFields | RequestError] | PlainBatch,
        ack: Ack,
        trace: TraceContext | None = None,
    ) -> list[BatchItem]:
        """One result per message, in order: an item that is already an error (the edge could not parse
        it) or fails validation fails only itself, named ``messages[i]...``."""
        check_batch_size(len(specs), self.batch_limit)
        return await self._send_many(specs, ack, trace, within=True)

    async def send_each(
        self, specs: Sequence[MessageFields], ack: Ack, trace: TraceContext | None = None
    ) -> list[BatchItem]:
        """What ``send`` answers for each message, sent together as one batch would be (a stream's
        messages: their errors name the field as ``send``'s do). The caller bounds ``specs``."""
        if spans.ON:  # a receive span per message, as each has when sent alone
            return await self._each_alone(specs, ack, trace)
        return await self._send_many(specs, ack, trace, within=False)

    async def _each_alone(
        self, specs: Sequence[MessageFields], ack: Ack, trace: TraceContext | None
    ) -> list[BatchItem]:
        """send_each's messages each sent alone, at once, but a sharding key's one after another in their
        order: sent together, the one whose send failed first would be spooled first and head its key's
        lane (retry.lanes), ahead of one read before it, where one batch keeps their order."""
        out: list[BatchItem | None] = [None] * len(specs)
        chains: dict[tuple[str, str] | int, list[int]] = {}  # a lane's messages, or one without a key
        for i, spec in enumerate(specs):
            chains.setdefault((spec.topic, spec.sharding_key) if spec.sharding_key else i, []).append(i)

        async def chain(idx: list[int]) -> None:
            for i in idx:
                out[i] = await self._one(specs[i], ack, trace)

        await asyncio.gather(*(chain(idx) for idx in chains.values()))
        return [r if r is not None else RuntimeError("no outcome") for r in out]

    async def _one(self, spec: MessageFields, ack: Ack, trace: TraceContext | None) -> BatchItem:
        try:
            return await self.send(spec, ack, trace)
        except Exception as exc:
            return exc

    async def _send_many(
        self,
        specs: Sequence[MessageFields | RequestError] | PlainBatch,
        ack: Ack,
        trace: TraceContext | None,
        *,
        within: bool,
    ) -> list[BatchItem]:
        now = self.now_ms()
        limits, names = self.limits, self.names
        ids = new_uniq_ids(len(specs))  # at once: a call less a message
        items = _prepared(specs, limits, now, names, ids, trace, within, self.lead_ms)
        if spans.ON:
            results = await self._traced_batch(items, ack)
        else:
            results = await self.sidecar.send_batch(items, ack)
        sent = SENT
        if type(results) is AllSent:  # the usual batch: every item an Outcome, SENT (no loop to count)
            n_sent = len(results)
        else:
            n_sent = [type(r) is Outcome and r.status is sent for r in results].count(True)
        self.count("SENT", n_sent)
        if n_sent < len(results):
            others = (item_label(r) for r in results if not (type(r) is Outcome and r.status is sent))
            for label, n in Counter(others).items():
                self.count(label, n)
        return results

    async def _traced_batch(self, items: list[Prepared | RequestError], ack: Ack) -> list[BatchItem]:
        good = [p for p in items if isinstance(p, Prepared)]

        async def send(messages: list[Message]) -> list[BatchItem]:
            for p, m in zip(good, messages, strict=True):
                p.message = m
            return await self.sidecar.send_batch(items, ack)

        return await spans.receive_batch([p.message for p in good], send)

    async def status(self, id: str) -> MessageState:
        found = await self.sidecar.status(id)
        if found is None:
            raise not_found(id)
        return found

    async def cancel(self, id: str) -> None:
        """Cancel a scheduled message; raises 404 when there is none, 409 when it was already sent."""
        result = await self.sidecar.cancel(id)
        if result is CancelOutcome.NOT_FOUND:
            raise RequestError.not_found(f"no scheduled message {problems.clip(id)}", field="id")
        if result is CancelOutcome.ALREADY_SENT:
            raise RequestError(
                f"message {problems.clip(id)} was already sent", field="id", status=409, title="Conflict"
            )


def _prepared(
    specs: Sequence[MessageFields | RequestError] | PlainBatch,
    limits: Limits,
    now: int,
    names: FieldNames,
    ids: list[str],
    trace: TraceContext | None,
    within: bool,
    lead_ms: Callable[[], int] | None = None,
) -> list[Prepared | RequestError]:
    """Each item of a batch prepared with its id, or the error that rejects it alone (named
    ``messages[i]`` when ``within``: a batch's; a stream's messages are named as ``send`` names them)."""
    if isinstance(specs, PlainBatch):  # every message a topic and a text body: their checks a batch at once
        if trace is None:
            plain = prepare_plain(specs, limits, ids)
            if plain is not None:
                return plain  # type: ignore[return-value]
        specs = specs.fields()  # the loop below finds the one that fails, or adds the trace context
    if trace is None and _SPECS.issuperset(map(type, specs)):
        # The usual batch, every item parsed: one comprehension (no call, append and checks per message
        # of the loop below); prepare depends only on its arguments, so a bad item found here is found
        # again, in place, by the loop.
        try:
            return [
                prepare(spec, limits, now, names, id, lead_ms)  # type: ignore[arg-type]
                for spec, id in zip(specs, ids, strict=True)
            ]
        except RequestError:
            pass
    items: list[Prepared | RequestError] = []
    for i, spec in enumerate(specs):
        if isinstance(spec, RequestError):
            items.append(spec)  # already names messages[i]
            continue
        try:
            prepared = prepare(spec, limits, now, names, ids[i], lead_ms)  # not self.prepare: a call less
        except RequestError as exc:
            items.append(exc.within(f"messages[{i}]") if within else exc)
            continue
        if trace is not None:
            prepared.message = inherit(prepared.message, trace)
        items.append(prepared)
    return items
