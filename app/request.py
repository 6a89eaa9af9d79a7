"""Turn an API message (HTTP JSON or gRPC) into a validated Message with its id, or a RequestError that
names the offending field. Shared by both APIs so they accept and reject exactly the same things."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import Any

import msgspec

from rocksidecar.rmq import InvalidMessageError, Message, new_uniq_id
from rocksidecar.rmq.message import NAME_VALUE_SEP, PROPERTIES_LIMIT, PROPERTY_SEP, validate_batch_topic

from .topic_allow import TopicAllowList
from .tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY, clean


class RequestError(Exception):
    """Bad input: ``status`` is the HTTP status, ``field`` the JSON path of the bad value."""

    def __init__(
        self, detail: str, *, field: str | None, status: int = 400, title: str = "Invalid request"
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.status = status
        self.title = title

    @classmethod
    def not_found(cls, detail: str, *, field: str) -> RequestError:
        """The 404 of a lookup by name or id (``field`` names what was looked up)."""
        return cls(detail, field=field, status=404, title="Not found")

    def within(self, prefix: str) -> RequestError:
        """The same error for an item of a batch (``messages[3].topic``)."""
        path = f"{prefix}.{self.field}" if self.field else prefix
        return RequestError(self.detail, field=path, status=self.status, title=self.title)


@dataclass(frozen=True, slots=True)
class Limits:
    """The one set of limits both APIs validate a message against."""

    max_body_bytes: int
    max_delay_ms: int
    delay: bool = True  # whether delayed delivery is available (501 otherwise)
    topics: TopicAllowList | None = None  # ROCKSIDECAR_TOPICS; None: any valid topic


@dataclass(frozen=True, slots=True)
class FieldNames:
    """How one API spells the fields whose names differ between HTTP (camelCase JSON) and gRPC
    (snake_case protobuf): the errors of ``prepare`` name the field as the caller's API does."""

    body_base64: str
    sharding_key: str
    delay_ms: str
    deliver_at: str
    idempotency_key: str


HTTP_FIELDS = FieldNames("bodyBase64", "shardingKey", "delayMs", "deliverAt", "Idempotency-Key")
GRPC_FIELDS = FieldNames("body_bytes", "sharding_key", "delay_ms", "deliver_at", "idempotency_key")


# The property a JSON body (an object or an array, not text) is marked with.
CONTENT_TYPE_PROPERTY = "content-type"
JSON_CONTENT_TYPE = "application/json"
# Epoch milliseconds fit in 16 digits until the year 318857; bound the text before int() parses it.
MAX_TIME_CHARS = 64
# A sharding key picks a queue by its hash: nothing longer is needed. The Rock-DMQ service takes no longer
# one (app.dmq.inner), and in service mode a delayed message's key travels to it as a property.
MAX_SHARDING_KEY_CHARS = 1024
# What the property limit leaves room for: a key takes two bytes of it at least (one character and the
# space between keys), a property four (a name, a value, two separators). More can never be sent, so
# they are refused by count, before anything is done per key (1.6 M keys took 1.3 s in validate()); the
# APIs bound them before parsing too (app.api.parsing, app.api.grpc_edge).
MAX_KEYS = PROPERTIES_LIMIT // 2
MAX_PROPERTIES = PROPERTIES_LIMIT // 4
# How deep a JSON body may nest (``[[1]]`` is 2). json.dumps recurses per level and raised RecursionError
# (a 500) wherever the stack happened to end, from about 940 levels; a fixed bound says the same thing at
# every stack depth. Room to spare for what anyone sends, and what a push subscription writes back as JSON.
MAX_JSON_DEPTH = 256


class MessageFields(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """An API message before validation, and the one declaration of its fields: the HTTP fast path
    decodes JSON straight into it (camelCase names, unknown fields refused: app.api.parsing), the other
    HTTP paths and gRPC (``MessageSpec``) build one. Exactly one of ``body`` (text, or a JSON object or
    array), ``body_base64`` (HTTP) and ``body_bytes`` (gRPC)."""

    topic: str
    body: str | dict[str, Any] | list[Any] | None = None
    body_base64: str | None = None
    tags: str | None = None
    keys: list[str] = []
    properties: dict[str, str] = {}
    sharding_key: str | None = None
    type: str | None = None
    delay_ms: int | None = None
    deliver_at: int | str | None = None

    @property
    def body_bytes(self) -> bytes | None:
        return None  # over HTTP binary bodies come as bodyBase64


class MessageSpec(MessageFields):
    """A message from gRPC, the one API that carries raw bytes."""

    body_bytes: bytes | None = None


class Prepared(msgspec.Struct, gc=False):
    """A validated message and how to deliver it. A Struct, not a dataclass: one is built per message,
    and its __init__ in C takes ~0.9k instructions against a slots dataclass's ~1.9k (issue 32). Not
    tracked by the cyclic GC: it holds a Message and plain values, no cycle can pass through it."""

    message: Message  # with its id (UNIQ_KEY) assigned
    sharding_key: str | None
    type: str
    deliver_at_ms: int | None  # None: send now


def _not_utf8(names: FieldNames) -> RequestError:
    """A text body that UTF-8 cannot encode (a lone surrogate such as JSON's "\\ud800")."""
    return RequestError(f"the body is not valid UTF-8 text (use {names.body_base64})", field="body")


def _check_utf8(spec: MessageFields, names: FieldNames) -> None:
    """The wire and the stores carry text as UTF-8, which cannot encode a lone surrogate (JSON's "\\ud800"):
    refused here, naming the field, rather than failing (a 500) wherever it was first encoded."""
    props = spec.properties
    joined = (spec.tags or "") + (spec.sharding_key or "") + (spec.type or "")  # 0.13 us, 0.35 joined
    if spec.keys or props:
        joined += "".join((*spec.keys, *props, *props.values()))
    if joined.isascii() or _utf8(joined):  # one check for the usual message
        return
    named = [("tags", spec.tags), (names.sharding_key, spec.sharding_key), ("type", spec.type)]
    named += [(f"keys[{i}]", key) for i, key in enumerate(spec.keys)]
    named += [("properties", name) for name in props]  # a bad name cannot be part of the field's name
    named += [(f"properties.{name}", value) for name, value in props.items()]
    field = next(field for field, text in named if text is not None and not _utf8(text))
    raise RequestError(f"{field} is not valid UTF-8 text (a lone surrogate)", field=field)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def too_many_keys() -> RequestError:
    return RequestError(
        f"at most {MAX_KEYS} keys: with the properties they take at most {PROPERTIES_LIMIT} bytes",
        field="keys",
    )


def too_many_properties() -> RequestError:
    return RequestError(
        f"at most {MAX_PROPERTIES} properties: with the keys they take at most {PROPERTIES_LIMIT} bytes",
        field="properties",
    )


_CONTAINERS = {dict, list}  # what a JSON body nests (msgspec and pydantic build no others)
_CONTAINER = _CONTAINERS.__contains__


def _nested_at_most(value: dict[str, Any] | list[Any], most: int) -> bool:
    """Whether ``value`` nests at most ``most`` levels: a level at a time, without recursing (the stack is
    what is being protected), its containers picked out in C (isdisjoint, compress, map): a third of
    what json.dumps takes for an array of 2 M numbers."""
    level: list[Any] = [value]
    for _ in range(most):
        inner: list[Any] = []
        for container in level:
            items = container.values() if type(container) is dict else container
            if not _CONTAINERS.isdisjoint(map(type, items)):  # most hold none: no second pass
                inner.extend(compress(items, map(_CONTAINER, map(type, items))))
        if not inner:
            return True
        level = inner
    return False


def _json_body(value: dict[str, Any] | list[Any], names: FieldNames) -> bytes:
    if not _nested_at_most(value, MAX_JSON_DEPTH):
        raise RequestError(f"the body nests deeper than {MAX_JSON_DEPTH} levels", field="body")
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (ValueError, TypeError):  # inf from a float such as 1e400; an integer too long to parse
        raise RequestError("the body holds a number out of range", field="body") from None
    except UnicodeEncodeError:
        raise _not_utf8(names) from None
    except RecursionError:  # within MAX_JSON_DEPTH only on a stack already near its limit: still the input's
        raise RequestError("the body nests too deeply to encode", field="body") from None


def _any_body(spec: MessageFields, limits: Limits, names: FieldNames) -> bytes:
    given = [x for x in (spec.body, spec.body_base64, spec.body_bytes) if x is not None]
    if len(given) != 1:
        raise RequestError(f"give exactly one of body (text or JSON) and {names.body_base64}", field="body")
    if isinstance(spec.body, str):
        try:
            data = spec.body.encode("utf-8")
        except UnicodeEncodeError:
            raise _not_utf8(names) from None
        name = "body"
    elif spec.body is not None:
        data, name = _json_body(spec.body, names), "body"
    elif spec.body_bytes is not None:
        data, name = spec.body_bytes, names.body_base64
    else:
        name = names.body_base64
        try:
            data = base64.b64decode(spec.body_base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise RequestError("not valid base64", field=name) from None
    if not data:
        raise RequestError("the body is empty", field=name)
    if len(data) > limits.max_body_bytes:
        raise RequestError(
            f"the body is {len(data)} bytes; at most {limits.max_body_bytes}",
            field=name,
            status=413,
            title="Body too large",
        )
    return data


def parse_time_ms(value: int | str, name: str) -> int:
    """Epoch milliseconds, or an RFC 3339 timestamp with an offset."""
    if isinstance(value, bool):
        raise RequestError("expected epoch milliseconds or an RFC 3339 timestamp", field=name)
    if isinstance(value, int):
        if not -(10**16) < value < 10**16:
            raise RequestError("epoch milliseconds out of range", field=name)
        return value
    if len(value) > MAX_TIME_CHARS:
        raise RequestError(f"at most {MAX_TIME_CHARS} characters", field=name)
    text = value.strip()
    # ASCII digits after at most one minus: what int() surely takes (str.isdigit alone takes "²", and
    # lstrip("-") let "--5" through to int(), a ValueError and so a 500). Anything else must be RFC 3339.
    if text.isascii() and (text[1:] if text[:1] == "-" else text).isdigit():
        return parse_time_ms(int(text), name)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise RequestError(
            f"{value!r} is neither epoch milliseconds nor an RFC 3339 timestamp", field=name
        ) from None
    if when.tzinfo is None:
        raise RequestError("an RFC 3339 timestamp needs a time zone offset (or Z)", field=name)
    try:
        return int(when.timestamp() * 1000)
    except (OverflowError, ValueError):  # year 1 minus an offset, and the like
        raise RequestError(f"{value!r} is out of range", field=name) from None


def _due(
    spec: MessageFields, limits: Limits, now_ms: int, names: FieldNames, lead_ms: Callable[[], int] | None
) -> int | None:
    """The due time by the delay store's clock (``now_ms``), or None: send now."""
    delay, deliver_at = names.delay_ms, names.deliver_at
    if spec.delay_ms is not None and spec.deliver_at is not None:
        raise RequestError(f"give at most one of {delay} and {deliver_at}", field=delay)
    if spec.delay_ms is not None:
        if isinstance(spec.delay_ms, bool) or spec.delay_ms < 0:
            raise RequestError(f"{delay} must be a non-negative integer", field=delay)
        if spec.delay_ms > limits.max_delay_ms:
            raise RequestError(f"{delay} is beyond the maximum of {limits.max_delay_ms} ms", field=delay)
        due = now_ms + spec.delay_ms if spec.delay_ms > 0 else None
        name = delay
    elif spec.deliver_at is not None:
        # deliverAt is a wall time; the store's clock runs ahead of the wall clock after a step back
        # (storage.clock): moved onto it, it is due when the wall clock reaches it, not the step earlier.
        # deliver_at_ms (the send and status answers) then reports this due time by the store's clock, as
        # a delayMs one: the deliverAt asked for plus the lead (0 in the usual case: the same number).
        at = parse_time_ms(spec.deliver_at, deliver_at) + (lead_ms() if lead_ms is not None else 0)
        if at - now_ms > limits.max_delay_ms:
            raise RequestError(
                f"{deliver_at} is more than the maximum of {limits.max_delay_ms} ms ahead", field=deliver_at
            )
        due = at if at > now_ms else None  # a time in the past means "now"
        name = deliver_at
    else:
        return None
    if due is not None and not limits.delay:
        raise RequestError(
            "delayed delivery is not available in this sidecar",
            field=name,
            status=501,
            title="Not implemented",
        )
    return due


def _check_sharding_key(key: str, name: str) -> None:
    if not key:
        raise RequestError(f"{name} must not be empty", field=name)
    if len(key) > MAX_SHARDING_KEY_CHARS:
        raise RequestError(f"{name} is {len(key)} characters; at most {MAX_SHARDING_KEY_CHARS}", field=name)
    if NAME_VALUE_SEP in key or PROPERTY_SEP in key:
        raise RequestError(f"{name} contains a protocol separator (\\x01 or \\x02)", field=name)


_SENDABLE: set[str] = set()  # topics check_send_topic passed: the send path's one set lookup a message
_SENDABLE_MAX = 10_000  # as rmq's own cache of valid topics: past it, a new name is checked each time


def check_send_topic(topic: str, field: str = "topic") -> None:
    """Raises RequestError naming ``field`` when the sidecar does not send to ``topic``: one Java's rules
    refuse, or a consumer group's retry topic, to which the brokers take no batches (rmq's
    validate_batch_topic: a message to one was accepted, then dead-lettered at its first send). The send
    APIs and the DMQ's real topics check here."""
    try:
        validate_batch_topic(topic, field)
    except InvalidMessageError as exc:
        raise RequestError(str(exc), field=field) from None
    if len(_SENDABLE) < _SENDABLE_MAX:
        _SENDABLE.add(topic)


def prepare(
    spec: MessageFields,
    limits: Limits,
    now_ms: int,
    names: FieldNames = HTTP_FIELDS,
    id: str | None = None,
    lead_ms: Callable[[], int] | None = None,
) -> Prepared:
    """Validate everything about one message, the same for both APIs; RequestError names the first bad
    field as the caller's API spells it (``names``). ``id``: its UNIQ_KEY, when the caller drew the ids
    of a batch at once (a fresh one otherwise). ``now_ms``: the delay store's clock (read only for a
    delayed message); ``lead_ms``: how far it runs ahead of the wall clock (its store's ``lead_ms``,
    called only for a deliverAt; None: not at all)."""
    if spec.topic not in _SENDABLE:
        check_send_topic(spec.topic)
    if limits.topics is not None and not limits.topics.allows(spec.topic):
        raise RequestError(
            f"topic {spec.topic!r} is not allowed here (not in ROCKSIDECAR_TOPICS)", field="topic"
        )
    text = spec.body
    # The usual message: text, no other body, encoded here (a call less). body_bytes is a def property of
    # MessageFields (always None) and a field of MessageSpec: its type says so without the call.
    if (
        type(text) is str
        and spec.body_base64 is None
        and (type(spec) is MessageFields or spec.body_bytes is None)
    ):
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:
            raise _not_utf8(names) from None
        if not body or len(body) > limits.max_body_bytes:
            body = _any_body(spec, limits, names)  # says what is wrong with it
    else:
        body = _any_body(spec, limits, names)
    if spec.sharding_key is not None:
        _check_sharding_key(spec.sharding_key, names.sharding_key)
    if spec.type is not None and (not spec.type or len(spec.type) > 128 or ":" in spec.type):
        raise RequestError("type must be 1-128 characters without ':'", field="type")
    if spec.tags is not None or spec.keys or spec.properties or spec.sharding_key or spec.type:
        if len(spec.keys) > MAX_KEYS:  # before anything is done per key
            raise too_many_keys()
        if len(spec.properties) > MAX_PROPERTIES:
            raise too_many_properties()
        _check_utf8(spec, names)
    properties = dict(spec.properties) if spec.properties else {}
    if properties and (TRACEPARENT_PROPERTY in properties or TRACESTATE_PROPERTY in properties):
        clean(properties)  # a trace context given as properties (a Spark row's) is kept only when valid
    if spec.body is not None and not isinstance(spec.body, str):
        properties.setdefault(CONTENT_TYPE_PROPERTY, JSON_CONTENT_TYPE)
    # positional: topic, body, tags, keys, properties, flag, id (one per message of a batch)
    keys = tuple(spec.keys) if spec.keys else ()
    message = Message(spec.topic, body, spec.tags or None, keys, properties, 0, id or new_uniq_id())
    # Without tags, keys and properties, all a message has is its topic and body, checked above, and the
    # id made here: validate() would check them again (a quarter of prepare's time in a batch).
    if properties or message.tags is not None or message.keys:
        try:
            message.validate(limits.max_body_bytes)
        except InvalidMessageError as exc:
            field = names.body_base64 if exc.field == "body" else exc.field
            if field == "properties" and _keys_bytes(message.keys) > PROPERTIES_LIMIT:
                field = "keys"  # the keys alone are over the limit: the field to change
            raise RequestError(str(exc), field=field) from None
    # Most messages are for now: no call to find that out.
    due = (
        None
        if spec.delay_ms is None and spec.deliver_at is None
        else _due(spec, limits, now_ms, names, lead_ms)
    )
    return Prepared(message, spec.sharding_key, spec.type or spec.topic, due)


def _keys_bytes(keys: Sequence[str]) -> int:
    """What ``keys`` take of the property limit (the KEYS item's text, a space after each key)."""
    return sum(len(key.encode()) + 1 for key in keys)


class PlainFields(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A message of a topic and a text body, nothing else: what most messages of a batch are, and what
    the HTTP batch path decodes first (app.api.parsing), so that its type says no other field is set
    (checking that of each MessageFields took ~3k instructions a message, issue 32). Holds two strings:
    not tracked by the cyclic GC."""

    topic: str
    body: str

    def fields(self) -> MessageFields:
        """The same message as the general path takes it."""
        return MessageFields(self.topic, self.body)


def prepare_plain(items: Sequence[PlainFields], limits: Limits, ids: Sequence[str]) -> list[Prepared] | None:
    """What ``prepare(item.fields(), limits, now, names, id)`` returns for each item, or None when any of
    them would not pass (then the caller prepares each, and the one that fails says why). The checks of
    ``prepare`` for a message of only a topic and a text body, a batch at once: each topic (once per
    distinct topic), each body (UTF-8, not empty, within the limit)."""
    for topic in set(map(_TOPIC, items)):
        if topic not in _SENDABLE:  # check_send_topic as prepare calls it: a retry topic is refused too
            try:
                check_send_topic(topic)
            except RequestError:
                return None
        if limits.topics is not None and not limits.topics.allows(topic):
            return None
    most = limits.max_body_bytes
    try:
        # positional: Message(topic, body, tags, keys, properties, flag, id); Prepared(message,
        # sharding_key, type, deliver_at_ms): a message's type is its topic when it names none.
        out = [
            Prepared(Message(p.topic, body, None, (), {}, 0, id), None, p.topic, None)
            for p, id in zip(items, ids, strict=True)
            if 0 < len(body := p.body.encode("utf-8")) <= most
        ]
    except UnicodeEncodeError:
        return None
    return out if len(out) == len(items) else None


_TOPIC = attrgetter("topic")
