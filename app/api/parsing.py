"""Request bodies of the hot routes, parsed into the schema models.

The fast path is msgspec, decoding the raw bytes into ``MessageFields`` (app.request), which has the
fields, names and types of ``MessageIn`` (about four times faster than pydantic: 0.22 against 0.87 us
per message of a batch). It accepts only what pydantic accepts (tests/app/api/test_parsing_agrees.py
checks); what it refuses goes on to pydantic's ``validate_json``, which also takes what msgspec does not
(6926.0 for an integer, a number too large for a float), its result copied into ``MessageFields``. Only
when that fails too is the body parsed again, slowly, to say precisely what is wrong: JSON numbers are
bounded before they are converted (a 5 000-digit number is "out of range" for its field, not a
malformed request nor a 500), and each message of a batch is validated on its own, so that a bad one
fails only itself (``messages[3].topic``).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from pydantic import ValidationError

from ..request import (
    MAX_JSON_DEPTH,
    MAX_KEYS,
    MAX_PROPERTIES,
    MessageFields,
    PlainFields,
    RequestError,
    too_many_keys,
    too_many_properties,
)
from . import json_count, problems
from .schemas import BatchIn, MessageIn


class _FastBatch(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[MessageFields]


class _PlainBatch(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[PlainFields]


class PlainBatch(list[PlainFields]):
    """A batch whose every message is a topic and a text body, nothing else (the usual one): its type
    says so, so that the operations need not look at each message's other fields (issue 32)."""

    __slots__ = ()

    def fields(self) -> list[MessageFields | RequestError]:
        """The messages as the general path takes them."""
        return [p.fields() for p in self]


BatchSpecs = list[MessageFields | RequestError] | PlainBatch  # what parse_batch gives the operations

_decode_message = msgspec.json.Decoder(MessageFields).decode
_decode_batch = msgspec.json.Decoder(_FastBatch).decode
_decode_plain = msgspec.json.Decoder(_PlainBatch).decode

# What msgspec raises besides DecodeError: for nesting deeper than its limit, and for bytes that are not
# UTF-8 in a string (both were 500s). The slower parsers below then say what is wrong.
_UNDECODED = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)

MAX_NUMBER_CHARS = 4000  # below Python's int() limit of 4300 digits; checked before converting
VALUES_PER_MESSAGE = 256  # on average in a batch: fields, keys and properties, with room to spare
# The JSON values of a message besides a JSON body's: its fields, each key, each property's value (and
# the array and object holding them). A body of no more values than this needs no closer look.
MESSAGE_VALUES = MAX_KEYS + MAX_PROPERTIES + 16


class _Shape(msgspec.Struct):
    """Where a message's keys and properties are, unparsed (msgspec.Raw: a slice of the document, no
    value built). Other fields are skipped; the parser says what is wrong with them."""

    keys: msgspec.Raw = msgspec.Raw(b"[]")
    properties: msgspec.Raw = msgspec.Raw(b"{}")


_decode_shape = msgspec.json.Decoder(_Shape).decode


class _OutOfRange:
    """A JSON integer too long to convert. No field accepts it (strict mode: it is neither int nor str)."""

    def __init__(self, text: str) -> None:
        self.digits = len(text)

    def __repr__(self) -> str:
        return f"<a {self.digits}-digit number>"


def _number(text: str) -> Any:
    return _OutOfRange(text) if len(text) > MAX_NUMBER_CHARS else int(text)


def _refuse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _loads(raw: bytes) -> Any:
    """The document with bounded numbers; RequestError if it is not JSON."""
    try:
        return json.loads(raw, parse_int=_number, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise RequestError(
            f"the request body is not valid JSON: {exc}", field=None, title="Malformed JSON"
        ) from None
    except RecursionError:  # nested past what the parsers take (some 950 levels): no item can be told apart
        raise RequestError(
            f"the request body nests too deeply to parse (a message's JSON body: at most {MAX_JSON_DEPTH} "
            "levels)",
            field=None,
            title="Malformed JSON",  # as before: what a client may tell this refusal by
        ) from None


# Fields that take several JSON types: pydantic reports one error per type, under loc (field, type).
_UNION_FIELDS = {
    "body": "must be text (a string), a JSON object or a JSON array",
    "deliverAt": "must be epoch milliseconds (an integer) or an RFC 3339 timestamp (a string)",
}


def _error(exc: ValidationError, prefix: str = "") -> RequestError:
    errors = exc.errors(include_url=False)
    loc = errors[0]["loc"] if errors else ()
    if loc and loc[0] in _UNION_FIELDS:
        name = str(loc[0])
        path = f"{prefix}.{name}" if prefix else name
        return RequestError(f"{path} {_UNION_FIELDS[name]}", field=path)
    doc = problems.from_validation(errors)
    fld = doc.get("field")
    detail = doc["detail"]
    if prefix:
        fld = f"{prefix}.{fld}" if fld else prefix
        detail = f"{prefix}.{detail}" if doc.get("field") else f"{prefix}: {detail}"
    return RequestError(detail, field=fld, title=doc["title"])


def _fields(model: MessageIn) -> MessageFields:
    """What pydantic validated, as the type every path hands on (only when msgspec refused the body)."""
    return MessageFields(**model.__dict__)  # not dict(model): the field `keys` shadows a mapping's keys()


def _validate(doc: Any, prefix: str = "") -> MessageFields:
    if not isinstance(doc, dict):
        what = f"{prefix} must be" if prefix else "the request body must be"
        raise RequestError(f"{what} a JSON object (a message)", field=prefix or None)
    for name, value in doc.items():
        if isinstance(value, _OutOfRange) and name in ("delayMs", "deliverAt"):
            path = f"{prefix}.{name}" if prefix else name
            raise RequestError(f"{path}: number out of range", field=path)
    try:
        return _fields(MessageIn.model_validate(doc))
    except ValidationError as exc:
        raise _error(exc, prefix) from None


def parse_message(raw: bytes) -> MessageFields:
    """One message. Raises RequestError naming the bad field."""
    if len(raw) > MESSAGE_VALUES:  # else it cannot hold too many values: every value takes a byte at least
        _bound_message(raw)
    try:
        return _decode_message(raw)
    except _UNDECODED:
        pass
    try:
        return _fields(MessageIn.model_validate_json(raw))
    except ValidationError:
        pass
    return _validate(_loads(raw))


def _bound_message(raw: bytes) -> None:
    """Refuse too many keys or properties before parsing builds each of them (1.66 M keys in a 6.6 MB
    body took 96 MB and 1.3 s of the event loop before they were refused), counted as the batch route
    counts its values (app.api.json_count). A JSON body may hold millions of values, which are its
    own business: only when the document has too many are the two fields found and counted alone.

    Raises:
        RequestError: 400 naming ``keys`` or ``properties``.
    """
    if json_count.values_at_most(raw, MESSAGE_VALUES):
        return
    try:
        shape = _decode_shape(raw)
    except _UNDECODED:
        return  # not a JSON object: the parser says what is wrong with it
    # + 1: the array, the object
    if not json_count.values_at_most(bytes(shape.keys), MAX_KEYS + 1):
        raise too_many_keys()
    if not json_count.values_at_most(bytes(shape.properties), MAX_PROPERTIES + 1):
        raise too_many_properties()


def parse_batch(raw: bytes, limit: int) -> BatchSpecs:
    """The messages of a batch, each parsed or the error that rejects it alone (a PlainBatch when every
    message is a topic and a text body: what MessageFields would hold, without its other fields). Raises
    RequestError when the request as a whole is wrong (not a {"messages": [...]} object, or not 1 to
    ``limit`` messages)."""
    try:
        plain = PlainBatch(_decode_plain(raw).messages)  # accepts a part of what _decode_batch does
    except _UNDECODED:
        pass
    else:
        check_batch_size(len(plain), limit)
        return plain
    try:
        items: list[MessageFields | RequestError] = list(_decode_batch(raw).messages)
        check_batch_size(len(items), limit)
        return items
    except _UNDECODED:
        pass
    try:
        items = [_fields(m) for m in BatchIn.model_validate_json(raw).messages]
    except ValidationError:
        items = []
        doc = _loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            raise RequestError(
                'the request must be an object {"messages": [...]}', field="messages" if doc else None
            ) from None
        unknown = sorted(set(doc) - {"messages"})
        if unknown:
            raise RequestError(f"{unknown[0]}: unknown field", field=unknown[0]) from None
        check_batch_size(len(doc["messages"]), limit)
        for i, item in enumerate(doc["messages"]):
            try:
                items.append(_validate(item, f"messages[{i}]"))
            except RequestError as exc:
                items.append(exc)
        return items
    check_batch_size(len(items), limit)
    return items


def check_batch_size(n: int, limit: int) -> None:
    """Raises RequestError unless 1 <= n <= limit (413 when over: the request is too large)."""
    if not 1 <= n <= limit:
        raise RequestError(
            f"a batch holds 1 to {limit} messages, not {n}",
            field="messages",
            status=413 if n else 400,
            title="Batch too large" if n else "Invalid request",
        )
