"""One mapping from every error to an HTTP status and an RFC 9457 problem body (gRPC maps the same
statuses to its codes). Bad input is 4xx naming the field; a full or broken store is 503."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from rocksidecar.rmq import RocketMQError
from rocksidecar.storage.errors import StorageError

from ..request import RequestError

log = logging.getLogger(__name__)
PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_S = 5


def problem(status: int, title: str, detail: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if field is not None:
        body["field"] = field
    return body


def clip(value: str, limit: int = 64) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters: input is echoed, not mirrored
    (a 1 MiB id must not come back in the error, nor in gRPC's status header)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def status_of(exc: BaseException) -> int:
    """The HTTP status ``from_exception`` answers for ``exc``, without building (or logging) it."""
    if isinstance(exc, RequestError):
        return exc.status
    return 503 if isinstance(exc, StorageError | RocketMQError) else 500


def from_exception(exc: BaseException) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, problem body, extra headers) for any exception reaching an API edge."""
    if isinstance(exc, RequestError):
        return exc.status, problem(exc.status, exc.title, exc.detail, exc.field), {}
    if isinstance(exc, StorageError):
        detail = f"the local store cannot accept writes: {exc}"
        return 503, problem(503, "Store unavailable", detail), {"Retry-After": str(RETRY_AFTER_S)}
    if isinstance(exc, RocketMQError):
        return 503, problem(503, "Broker unavailable", str(exc)), {"Retry-After": str(RETRY_AFTER_S)}
    log.error("unexpected error at the API edge", exc_info=exc)
    return 500, problem(500, "Internal error", f"{type(exc).__name__}: {exc}"), {}


def field_path(loc: Sequence[str | int]) -> str:
    """pydantic's ('body', 'messages', 3, 'topic') as 'messages[3].topic'."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "header", "path") else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out  # "" when the request as a whole is wrong (e.g. not a JSON object)


def from_validation(errors: Sequence[Any]) -> dict[str, Any]:
    """A 400 problem for FastAPI's request validation errors, naming the first bad field."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return problem(400, "Malformed JSON", f"the request body is not valid JSON: {first.get('msg')}", None)
    path = field_path(loc)
    msg = "unknown field" if first.get("type") == "extra_forbidden" else str(first.get("msg", "invalid"))
    body = problem(400, "Invalid request", f"{path}: {msg}" if path else msg, path or None)
    if len(errors) > 1:
        body["errors"] = [
            {"field": field_path(tuple(e.get("loc", ()))), "detail": str(e.get("msg"))} for e in errors[:20]
        ]
    return body
