"""A gRPC method wrapper that answers a request that is not valid protobuf, or that holds too many
repeated values to decode, with INVALID_ARGUMENT.

grpc deserializes before the servicer runs, and a DecodeError there ends the call as UNKNOWN with a
traceback in the log. Here every method's deserializer returns a marker instead of raising, and the
method refuses the marker: a unary call at once, a stream where the bad message would have been (the
messages before it are handled and acknowledged as usual).

Decoding builds every repeated value: 8 MiB of empty messages in a SendBatch (2 bytes each on the wire)
took 637 MiB before their number could be checked. So the methods that carry messages count them first
(``WireBounds``), on the wire format, without building anything: a SendBatch's messages and fields (at
most the HTTP route's JSON values, app.api.http), a message's keys and properties. A request too short
to hold too many is not read at all: every repeated value takes two bytes at least. A request carrying
one message (Send, Publish, BeginTransaction) is bounded by its length too, by what one message may take:
grpc's receive limit is a whole batch's, for every method.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from ..request import MAX_KEYS, MAX_PROPERTIES, RequestError, too_many_keys, too_many_properties
from .grpc_intercept import checked_first, each_of, kind_of, result_of
from .parsing import VALUES_PER_MESSAGE

DETAIL = "the request is not a valid protobuf message of this method's type"


class Refused:
    """Stands in for a request that was not decoded: one that is not valid protobuf (``error`` None), or
    one over a bound (``error`` says which)."""

    __slots__ = ("error",)

    def __init__(self, error: RequestError | None) -> None:
        self.error = error


MALFORMED = Refused(None)


# The wire format (protobuf's encoding guide): a field is a varint tag, (number << 3) | wire type, then
# its value: a varint (0), 8 bytes (1), a varint length and that many bytes (2), 4 bytes (5); 3 and 4
# start and end a group, 6 and 7 are not used.
_LEN = 2
_MESSAGES = (1 << 3) | _LEN  # SendBatchRequest.messages
_KEY = (5 << 3) | _LEN  # Message.keys
_PROPERTY = (6 << 3) | _LEN  # Message.properties, a map: one entry a field
# Fields of a message and its request besides keys and properties: a valid one has at most 9 (topic, a
# body, tags, sharding key, type, a delay, and the request's ack, idempotency key, sequence); room for
# fields a newer client may add. Counted too, so that reading a request costs a bounded number of steps.
_OTHER_FIELDS = 32
_MESSAGE_FIELD = {"Send": (1, "message"), "BeginTransaction": (1, "message")}  # a request's Message
# The methods whose refused requests count as rejected messages too, as HTTP's message routes count
# theirs (a transaction's begin is not counted on either API); MalformedRequests' caller counts them.
SENDS_MESSAGES = frozenset({"Send", "SendBatch", "Publish"})
_PUBLISHED = (2 << 3) | _LEN  # PublishRequest.message


class _Corrupt(Exception):
    """The wire format breaks here: the decoder stops here too, having built no more than was counted."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:  # ten bytes at most
            raise _Corrupt


def _fields(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(tag, start, stop) of each field of ``data[pos:end]``: ``data[start:stop]`` is its value (a
    length-delimited one's without its length; empty for a group's tags). A group's start and end tags
    are fields of their own and what is between them is read as if outside: the decoder reads an unknown
    group field by field too, so the same bytes are fields either way, and counting one inside a group
    can only overcount. Lenient where the decoder is (tags and lengths in more bytes than needed):
    stricter, it would stop counting where the decoder goes on."""
    try:
        while pos < end:
            tag = data[pos]
            pos += 1
            if tag >= 0x80:  # one byte, the usual tag, without a call
                tag, pos = _varint(data, pos - 1)
            kind = tag & 7
            if kind == _LEN:
                size = data[pos]
                pos += 1
                if size >= 0x80:
                    size, pos = _varint(data, pos - 1)
                start, pos = pos, pos + size
            else:
                start = pos
                if kind == 0:
                    pos = _varint(data, pos)[1]
                elif kind == 1:
                    pos += 8
                elif kind == 5:
                    pos += 4
                elif kind > 5:
                    raise _Corrupt
            if pos > end:
                raise _Corrupt
            yield tag, start, pos
    except IndexError:  # a varint cut off by the end of the request
        raise _Corrupt from None


def _message_counts(data: bytes, pos: int, end: int, most: int) -> tuple[int, int, int]:
    """The keys, properties and other fields of the Message in ``data[pos:end]``, read until there are
    more than ``most`` in all."""
    keys = properties = others = 0
    for tag, _, _ in _fields(data, pos, end):
        if tag == _KEY:
            keys += 1
        elif tag == _PROPERTY:
            properties += 1
        else:
            others += 1
        if keys + properties + others > most:
            break
    return keys, properties, others


def _too_many_fields(most: int, field: str) -> RequestError:
    return RequestError(
        f"the request holds more than {most} fields besides keys and properties", field=field, status=413
    )


@dataclass(frozen=True, slots=True)
class WireBound:
    """A method's bound: ``check`` reads a request longer than ``scan_from`` bytes (a shorter one cannot
    hold too many values) and gives what the method gets instead of a request over the bound (a Refused,
    an Unread), or None: decode it."""

    scan_from: int
    check: Callable[[bytes], object | None]


@dataclass(frozen=True, slots=True)
class WireBounds:
    """The bounds of the Sidecar service's methods. The servicer holds one as ``wire_bounds`` (it knows
    the batch limit and the body limit), where ``MalformedRequests`` finds it.

    grpc has one receive limit for every method, a whole batch's (app.assembly); a request carrying one
    message is bounded here by what one message may take, ``max_body_bytes`` plus ``ENVELOPE_BYTES``
    (None: no such bound), before it is decoded: one that can never be sent is not held in memory,
    decoded, while it waits (a Publish stream's behind the batch in flight, up to its window of them)."""

    batch_limit: int
    max_body_bytes: int | None = None

    def for_method(self, name: str) -> WireBound | None:
        if name == "SendBatch":
            limit, most = self.batch_limit, self.batch_limit * VALUES_PER_MESSAGE
            return WireBound(2 * most, lambda data: _refused(_batch_over(data, limit, most)))
        size = None if self.max_body_bytes is None else self.max_body_bytes + ENVELOPE_BYTES
        if name == "Publish":  # one message of a stream: it fails alone, the stream goes on
            return WireBound(_SINGLE_SCAN_FROM, lambda data: _unread(data, size))
        if name in _MESSAGE_FIELD:
            number, field = _MESSAGE_FIELD[name]
            tag = (number << 3) | _LEN
            return WireBound(
                _SINGLE_SCAN_FROM,
                lambda data: _refused(_message_over(data, tag, field) or _single_over(data, size)),
            )
        return None


# What a request carrying one message may hold besides its body: the message's topic, keys and properties
# (PROPERTIES_LIMIT, 32 KiB, at most), its other fields and its request's, with room to spare.
ENVELOPE_BYTES = 1024 * 1024
_SINGLE_SCAN_FROM = 2 * (MAX_KEYS + MAX_PROPERTIES)  # shorter, a message holds no more than it may


def _single_over(data: bytes, size: int | None) -> RequestError | None:
    """Why a request carrying one message is refused by its length alone (longer than ``size``). Asked
    after the counts (``_message_over``, a bounded number of steps), so that a request over both bounds is
    told the more specific one: its keys or properties."""
    if size is None or len(data) <= size:
        return None
    return RequestError(
        f"a request carrying one message takes at most {size} bytes (the body limit and "
        f"{ENVELOPE_BYTES} for the rest); this one takes {len(data)}",
        field="message",
        status=413,
        title="Request too large",
    )


def _refused(error: RequestError | None) -> Refused | None:
    return None if error is None else Refused(error)


class Unread:
    """Stands in for a Publish request refused before it was decoded (its message over a bound): the
    stream answers its ``sequence`` with ``error`` and goes on (app.api.grpc_publish)."""

    __slots__ = ("error", "sequence")

    def __init__(self, sequence: int, error: RequestError) -> None:
        self.sequence = sequence
        self.error = error


_SEQUENCE = 1 << 3  # PublishRequest.sequence, a varint


def _unread(data: bytes, size: int | None) -> Unread | None:
    error = _message_over(data, _PUBLISHED, "message") or _single_over(data, size)
    if error is None:
        return None
    sequence = 0
    try:
        # Among the first fields, as many as _message_over read at most: a request of millions of
        # sequence fields (the last one counts) is refused without reading them all, its answer under
        # one of them.
        for tag, start, _ in islice(_fields(data, 0, len(data)), _OTHER_FIELDS + 1):
            if tag == _SEQUENCE:
                sequence = _varint(data, start)[0] & 0xFFFF_FFFF_FFFF_FFFF  # uint64; the last one counts
    except _Corrupt:  # what the decoder would refuse past the bound: the sequence read so far
        pass
    return Unread(sequence, error)


def _batch_over(data: bytes, limit: int, most: int) -> RequestError | None:
    """Why a SendBatchRequest is refused: more than ``limit`` messages, more than ``most`` keys and
    properties in all (the HTTP route's bound on a batch's JSON values), or more other fields than
    ``limit`` valid messages have; None when it is not."""
    most_others = limit * _OTHER_FIELDS
    messages = values = others = 0
    try:
        for tag, start, stop in _fields(data, 0, len(data)):
            if tag == _MESSAGES:
                messages += 1
                if messages > limit:
                    return RequestError(
                        f"a batch holds 1 to {limit} messages; this one more",
                        field="messages",
                        status=413,
                        title="Batch too large",
                    )
                keys, properties, inner = _message_counts(
                    data, start, stop, most - values + most_others - others
                )
                values += keys + properties
                others += inner
                if values > most:
                    return RequestError(
                        f"a batch holds at most {most} keys and properties in all",
                        field="messages",
                        status=413,
                        title="Batch too large",
                    )
            else:
                others += 1
            if others > most_others:
                return _too_many_fields(most_others, "messages")
    except _Corrupt:
        pass  # the decoder refuses it, having built no more than was counted
    return None


def _message_over(data: bytes, tag: int, field: str) -> RequestError | None:
    """Why a request carrying one message (``tag``: its field's, which may occur several times: the
    decoder merges them) is refused: more keys or properties than any message can send, or more other
    fields than it can have; None when it is not."""
    most = MAX_KEYS + MAX_PROPERTIES + _OTHER_FIELDS
    keys = properties = others = 0
    try:
        for outer, start, stop in _fields(data, 0, len(data)):
            if outer == tag:
                more = _message_counts(data, start, stop, most - keys - properties - others)
                keys, properties, others = keys + more[0], properties + more[1], others + more[2]
                if keys > MAX_KEYS:
                    return too_many_keys()
                if properties > MAX_PROPERTIES:
                    return too_many_properties()
            others += 1
            if others > _OTHER_FIELDS:
                return _too_many_fields(_OTHER_FIELDS, field)
    except _Corrupt:
        pass  # the decoder refuses it, having built no more than was counted
    return None


def _tolerant(
    deserialize: Callable[[bytes], Any] | None, bound: WireBound | None = None
) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None
    if bound is None:

        def parse(data: bytes) -> Any:
            try:
                return deserialize(data)
            except DecodeError:
                return MALFORMED

        return parse

    scan_from, check = bound.scan_from, bound.check

    def bounded(data: bytes) -> Any:
        if len(data) > scan_from:  # the one check a usual request pays
            instead = check(data)
            if instead is not None:
                return instead
        try:
            return deserialize(data)
        except DecodeError:
            return MALFORMED

    return bounded


class MalformedRequests:
    """A MethodWrapper (app.api.grpc_intercept)."""

    def __init__(self, on_malformed: Callable[[str, int], None]) -> None:
        self._on_malformed = on_malformed  # counts the refusal, by method name and the status it carries

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        name = method.rpartition("/")[2]
        refuse = self._refuser(name)
        kind = kind_of(handler)
        behavior = getattr(handler, kind) if kind is not None else None
        # The servicer's bounds, by its bound method (a service without any: decoded as it comes).
        bounds = getattr(getattr(behavior, "__self__", None), "wire_bounds", None)
        bound = bounds.for_method(name) if isinstance(bounds, WireBounds) else None
        wrapped: dict[str, Any] = {"request_deserializer": _tolerant(handler.request_deserializer, bound)}
        if kind is not None:
            wrapped[kind] = _WRAPPERS[kind](behavior, refuse, kind)
        return handler._replace(**wrapped)

    def _refuser(self, method: str) -> Refuse:
        async def refuse(context: grpc.aio.ServicerContext, refused: Refused) -> None:
            error = refused.error
            if error is None:
                field, status, detail = "", 400, DETAIL
            else:
                field, status, detail = error.field or "", error.status, error.detail
            self._on_malformed(method, status)
            context.set_trailing_metadata((("field", field), ("http-status", str(status))))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, detail)

        return refuse


Refuse = Callable[[grpc.aio.ServicerContext, Refused], Awaitable[None]]


class _Requests:
    """A request stream that stops at the first refused message and remembers it. The method gets this
    stream itself, so that it can tell a stream cut here from one its client ended (``cut_short``)."""

    def __init__(self, requests: AsyncIterator[Any]) -> None:
        self._requests = requests
        self.refused: Refused | None = None

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Any:
        if self.refused is not None:
            raise StopAsyncIteration
        request = await self._requests.__anext__()
        if type(request) is Refused:
            self.refused = request
            raise StopAsyncIteration
        return request


def cut_short(requests: object) -> bool:
    """Whether a stream method's ``requests`` were ended here, at a refused message: the call then ends
    with the refusal, which counts it, so the method must not count it as answered too."""
    return type(requests) is _Requests and requests.refused is not None


def _unary(behavior: Any, refuse: Refuse, kind: str) -> Any:
    if kind == "unary_unary" and inspect.iscoroutinefunction(behavior):
        # The sidecar's own unary methods: one coroutine per call (checked_first would add two more).
        async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if type(request) is Refused:
                await refuse(context, request)
            return await behavior(request, context)

        return answer

    async def check(request: Any, context: grpc.aio.ServicerContext) -> None:
        if type(request) is Refused:
            await refuse(context, request)

    return checked_first(kind, behavior, check)


def _stream_unary(behavior: Any, refuse: Refuse, kind: str) -> Any:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        checked = _Requests(requests)
        response = await result_of(behavior(checked, context))
        if checked.refused is not None:
            await refuse(context, checked.refused)
        return response

    return call


def _stream_stream(behavior: Any, refuse: Refuse, kind: str) -> Any:
    # An async generator (the sidecar's Publish) is iterated as it is: each_of would add a generator
    # step to every answer of the stream.
    answers = _as_is if inspect.isasyncgenfunction(behavior) else each_of

    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        checked = _Requests(requests)
        async for response in answers(behavior(checked, context)):
            yield response
        if checked.refused is not None:
            await refuse(context, checked.refused)

    return call


def _as_is(responses: AsyncIterator[Any]) -> AsyncIterator[Any]:
    return responses


_WRAPPERS: dict[str, Callable[[Any, Refuse, str], Any]] = {
    "unary_unary": _unary,
    "unary_stream": _unary,
    "stream_unary": _stream_unary,
    "stream_stream": _stream_stream,
}
