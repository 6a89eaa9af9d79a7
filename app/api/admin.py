"""The admin API under /v1/admin (same port, same auth as the rest of /v1): look into and steer the
retry and delay stores of the running sidecar.

- GET  /v1/admin/stats                     store depths and ages, brokers, replay on recovery
- GET  /v1/admin/retries                   pending (or dead: state=dead) messages; filters and paging
- GET  /v1/admin/scheduled                 scheduled (delayed) messages by due time; filters and paging
- GET  /v1/admin/messages/{id}             one message with its attempt history
- GET  /v1/admin/transactions              open transactions (state=open) or all (state=all); topic, paging
- POST /v1/admin/dead-letters:redrive      {"all": true} | {"id": ...} | {"topic": ..., "type": ...}
- POST /v1/admin/retries:replay            replay pending messages now: {} (all) or {"topic": ...}
- POST /v1/admin/retries:purge?confirm=yes delete pending or dead messages for good

Bad input is a 400 problem naming the field, and changes nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from rocksidecar.delay import DelayStore
from rocksidecar.delay.admin import ScheduledItem, scheduled_page
from rocksidecar.delay.message import DelayedMessage
from rocksidecar.retry.admin import DeadItem, PendingItem, Redriven, dead_page, pending_page, purge, redrive
from rocksidecar.retry.record import CorruptRecordError, RetryRecord
from rocksidecar.retry.recovery import RecoveryReplay
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.rmq.message import TOPIC_MAX_LEN, TOPIC_PATTERN
from rocksidecar.rmq.producer import BrokerState
from rocksidecar.storage.query import Filter, decode_cursor

from ..request import RequestError
from . import problems
from .schemas import Problem, integral

_V = TypeVar("_V")

MAX_LIMIT = 1000
MAX_DIGITS = 19  # an epoch millisecond has 13; int64 has 19
_INTEGER = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}")  # [0-9]: ASCII only, unlike \d or int()
PREFIX = "/v1/admin"
_PROBLEM = {"model": Problem, "content": {problems.PROBLEM_JSON: {}}}
_WHY = {
    400: "Invalid input; `field` names it. Nothing changed.",
    401: "Missing or wrong bearer token.",
    404: "No such message (or dead letter).",
    503: "The local store cannot accept writes (see Retry-After).",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {**_PROBLEM, "description": _WHY[code]} for code in (400, 401, *codes)}


def _query(*names: str, states: tuple[str, ...] = ("pending", "dead")) -> dict[str, Any]:
    """OpenAPI for the query parameters a listing reads itself."""
    schemas: dict[str, dict[str, Any]] = {
        "topic": {"type": "string"},
        "type": {"type": "string"},
        "state": {"type": "string", "enum": list(states), "default": states[0]},
        "dueAfter": {"type": "integer", "minimum": 0, "description": "epoch ms, inclusive"},
        "dueBefore": {"type": "integer", "minimum": 0, "description": "epoch ms, exclusive"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
        "cursor": {"type": "string", "description": "nextCursor of the previous page"},
        "confirm": {"type": "string", "enum": ["yes"], "description": "required: purging deletes for good"},
    }
    return {
        "parameters": [
            {"name": n, "in": "query", "required": n == "confirm", "schema": schemas[n]} for n in names
        ]
    }


def _json_body(model: type[BaseModel], **extra: Any) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True)
    return {
        "requestBody": {"required": False, "content": {"application/json": {"schema": schema}}},
        **extra,
    }


# A listing's reader (the store's page function, bound to its store) and how it shows each item.
_Source = tuple[Callable[..., Any], Callable[[Any], dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An item a reader lists whose stored value does not decode, for a source whose view takes only
    decoded ones (transactions): listed by ``listed_view`` as its id and why, as the retry and delay
    listings list theirs, rather than failing the whole page."""

    id: str
    corrupt: str


def listed_view(view: Callable[[Any], dict[str, Any]], item: Any) -> dict[str, Any]:
    """``item`` as a listing shows it: by ``view``, or an Unreadable one as its id and ``corrupt``."""
    if isinstance(item, Unreadable):
        return {"id": item.id, "corrupt": item.corrupt}
    return view(item)


@dataclass(frozen=True, slots=True)
class TransactionsView:
    """What the admin API and /ui show of transactions (app.transactions.admin.transactions_view builds
    it over the coordinator): the listings by state, the first the default, and a summary for stats."""

    sources: dict[str | None, _Source]
    summary: Callable[[], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class AdminOps:
    """What the admin routes steer."""

    retry: RetryStore
    delay: DelayStore
    replay: ReplayLoop
    recovery: RecoveryReplay
    brokers: Callable[[], Iterable[BrokerState]]
    now_ms: Callable[[], int]
    store_path: str = ""  # the CLI checks it talks to the sidecar that holds its store
    # Why the disk reserve was given up (drain mode on a full disk), or None: app.readiness.disk_draining
    disk_draining: Callable[[], str | None] = lambda: None
    transactions: TransactionsView | None = None  # None: the sidecar runs without transactions


class _Body(BaseModel):
    # Strict, as the send API's bodies: "5", " 5" or true is not a time, nor 1 a true (parsed leniently, a
    # purge took "dueAfter": true for 1 and deleted every pending message for good).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


# A topic a filter names: one a broker could hold (rmq's rule), so that a typo such as "a b" is a 400
# rather than a replay of nothing answered 202.
_Topic = Annotated[str, Field(min_length=1, max_length=TOPIC_MAX_LEN, pattern=f"^{TOPIC_PATTERN.pattern}$")]
# An epoch millisecond: an integer (6926.0 too, as JSON Schema's integer and the send API take it) of at
# most MAX_DIGITS digits, as the listings' query parameters.
_Ms = Annotated[int, Field(ge=0, le=10**MAX_DIGITS - 1), BeforeValidator(integral)]


class RedriveIn(_Body):
    all: bool = False
    cursor: str | None = Field(default=None, min_length=2, max_length=4096)  # nextCursor of a redrive
    id: str | None = Field(default=None, min_length=1)
    topic: _Topic | None = None
    type: str | None = Field(default=None, min_length=1)


class ReplayIn(_Body):
    topic: _Topic | None = None


class PurgeIn(_Body):
    state: Literal["pending", "dead"]
    topic: _Topic | None = None
    type: str | None = Field(default=None, min_length=1)
    due_before: _Ms | None = Field(default=None, alias="dueBefore")
    due_after: _Ms | None = Field(default=None, alias="dueAfter")


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status_code=status, media_type="application/json")


def problem_response(exc: BaseException) -> Response:
    status, body, headers = problems.from_exception(exc)
    return Response(orjson.dumps(body), status_code=status, media_type=problems.PROBLEM_JSON, headers=headers)


async def parse_body(request: Request, model: type[_Body]) -> Any:
    raw = await request.body()
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        doc = problems.from_validation(exc.errors(include_url=False))
        raise RequestError(doc["detail"], field=doc.get("field"), title=doc["title"]) from None


def _int_param(request: Request, name: str, *, lo: int = 0, hi: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    # int() also takes any Unicode digit (full-width ones, say), "1_000", "+1" and spaces: ASCII only.
    if not _INTEGER.fullmatch(raw):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise RequestError(
            f"{name} must be an integer in ASCII digits (at most {MAX_DIGITS}), got {shown!r}", field=name
        )
    value = int(raw)
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise RequestError(f"{name} must be {bound}, got {value}", field=name)
    return value


def _filter(request: Request) -> Filter:
    unknown = set(request.query_params) - {
        "topic",
        "type",
        "dueBefore",
        "dueAfter",
        "limit",
        "cursor",
        "state",
    }
    if unknown:
        name = sorted(unknown)[0]
        raise RequestError(f"{name}: unknown query parameter", field=name)
    return Filter(
        topic=request.query_params.get("topic") or None,
        type=request.query_params.get("type") or None,
        due_after_ms=_int_param(request, "dueAfter"),
        due_before_ms=_int_param(request, "dueBefore"),
    )


def _paging(request: Request) -> tuple[str | None, int]:
    return request.query_params.get("cursor") or None, _int_param(request, "limit", lo=1, hi=MAX_LIMIT) or 100


def _bad_cursor(exc: ValueError) -> RequestError:
    return RequestError(str(exc), field="cursor")


def _listing(request: Request, sources: dict[str | None, _Source]) -> Response:
    """The admin listings' one way to read the filter, the state (``sources`` by state; the key None:
    the listing has no states) and the paging, and to answer a bad one with a 400 naming it."""
    try:
        where = _filter(request)
        stateless = None in sources
        if stateless and "state" in request.query_params:
            raise RequestError("state: unknown query parameter here", field="state")
        cursor, limit = _paging(request)
        state = None if stateless else request.query_params.get("state", next(iter(sources)))
        if state not in sources:
            raise RequestError(
                f"state must be {' or '.join(map(str, sources))}, got {state!r}", field="state"
            )
        read, view = sources[state]
        if cursor is not None:
            # Only the cursor's own decode is the caller's fault: a ValueError from reading or viewing
            # the store (a damaged record: orjson's decode error is one) is no bad cursor.
            try:
                decode_cursor(cursor)
            except ValueError as exc:
                raise _bad_cursor(exc) from None
        found = read(where, cursor=cursor, limit=limit)
        items = [listed_view(view, i) for i in found.items]
    except Exception as exc:
        return problem_response(exc)
    return _json({"items": items, "nextCursor": found.cursor})


def _history(record: RetryRecord) -> list[dict[str, Any]]:
    return [{"atMs": at, "error": error} for at, error in record.history]


def pending_view(item: PendingItem) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": item.id, "state": "SPOOLED", "key": item.key.decode(errors="replace")}
    doc["nextAttemptAtMs"] = item.due_ms
    if item.waiting:  # behind its sharding key's first spooled message: goes right after it
        doc["waiting"] = True
    return _detailed(doc, item.record, item.corrupt, functools.partial(_listed_view, item.body_bytes))


def _listed_view(body_bytes: int, record: RetryRecord) -> dict[str, Any]:
    """A listed record's view: a listing's record holds no body (retry.admin), its item the length."""
    return {**_record_view(record), "bodyBytes": body_bytes}


def _record_view(record: RetryRecord) -> dict[str, Any]:
    return {
        **_message_view(record),
        "attempts": record.retry_count,
        "lastError": record.last_error,
        "firstFailureMs": record.first_failure_ms or None,
    }


def dead_view(letter: DeadItem) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": letter.id,
        "state": "DEAD",
        "key": letter.key.decode(errors="replace"),
        "reason": letter.reason,
        "deadAtMs": letter.dead_at_ms,
    }
    return _detailed(doc, letter.record, True, functools.partial(_listed_view, letter.body_bytes))


def scheduled_view(item: ScheduledItem) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": item.id, "state": "SCHEDULED", "dueMs": item.due_ms}
    return _detailed(doc, item.message, item.corrupt, _message_view)


def _message_view(msg: DelayedMessage | RetryRecord) -> dict[str, Any]:
    """What a spooled record and a scheduled message both have."""
    return {
        "topic": msg.topic,
        "type": msg.type,
        "tags": msg.tags,
        "keys": list(msg.keys),
        "createdMs": msg.created_ms,
        "bodyBytes": len(msg.body),
    }


def _detailed(
    doc: dict[str, Any], value: _V | None, corrupt: str | bool | None, view: Callable[[_V], dict[str, Any]]
) -> dict[str, Any]:
    """An item's listing: its ``view`` when its value decoded, else ``corrupt`` says why it has none."""
    if value is None:
        return {**doc, "corrupt": corrupt}
    return {**doc, **view(value)}


def _disk_view(draining: str | None) -> dict[str, Any]:
    return {"draining": draining is not None, "reason": draining}


def stats_view(ops: AdminOps) -> dict[str, Any]:
    retry = ops.retry.stats()
    scheduled = ops.delay.stats()
    now = ops.now_ms()
    since = retry.oldest_first_failure_ms or retry.oldest_due_ms  # the oldest pending's, not the next due's
    return {
        "nowMs": now,
        "store": ops.store_path,
        "disk": _disk_view(ops.disk_draining()),
        "retry": {
            "pending": retry.pending,
            "dead": retry.dead,
            "oldestDueMs": retry.oldest_due_ms,
            "oldestFirstFailureMs": retry.oldest_first_failure_ms,
            "oldestAgeS": round(max(now - since, 0) / 1000, 3) if since else 0.0,
            "inFlight": ops.replay.in_flight,
            "healthy": retry.healthy,
            "lastError": retry.last_error,
        },
        "scheduled": {"pending": scheduled.pending, "nextDueMs": scheduled.next_due_ms},
        "brokers": [b.to_json() for b in ops.brokers()],
        **({"transactions": ops.transactions.summary()} if ops.transactions is not None else {}),
        "recovery": {
            "running": ops.recovery.running,
            "lastRounds": [
                {"handedOut": r.handed_out, "stoppedEarly": r.stopped_early, "reasons": list(r.reasons)}
                for r in ops.recovery.rounds
            ],
        },
    }


def message_view(ops: AdminOps, id_: str) -> dict[str, Any] | None:
    doc: dict[str, Any] = {"id": id_}
    status = ops.retry.get(id_)
    if status is not None:
        if status.next_attempt_at_ms is not None:  # SPOOLED
            try:
                record = ops.retry.pending_record(status.key)
            except CorruptRecordError:
                record = None
            retry: dict[str, Any] = {
                "state": "SPOOLED",
                "key": status.key.decode(errors="replace"),
                "nextAttemptAtMs": status.next_attempt_at_ms,
            }
        else:
            letter = ops.retry.dead.get(status.key)
            record = letter.record if letter is not None else None
            retry = {
                "state": "DEAD",
                "key": status.key.decode(errors="replace"),
                "reason": status.reason,
                "deadAtMs": status.dead_at_ms,
            }
        if record is not None:
            retry.update(_record_view(record), history=_history(record))
        else:
            retry.update(attempts=status.attempts, lastError=status.last_error)
        doc["retry"] = retry
    scheduled = ops.delay.get(id_)
    if scheduled is not None:
        doc["scheduled"] = {
            "state": scheduled.state.value,
            "dueMs": scheduled.due_ms,
            "atMs": scheduled.at_ms,
            "topic": scheduled.topic,
        }
    return doc if len(doc) > 1 else None


async def redrive_dead(ops: AdminOps, body: RedriveIn) -> dict[str, Any]:
    """Re-drive by id, by filter or all (the admin route and the status page's button).

    ``nextCursor`` (not null) says the redrive ran out of time: repeat it with that cursor.
    ``stillDead`` counts the dead letters in the store when it answers (those that died again too).

    Raises:
        RequestError: not exactly one way given, a cursor with an id, a bad cursor, or no dead letter
            for the id (one that is there but corrupt is answered 200 with ``skipped``, as by filter).
    """
    chosen = [body.all, body.id is not None, body.topic is not None or body.type is not None]
    if sum(chosen) != 1:
        raise RequestError(
            'give exactly one of "all": true, "id", or a filter ("topic" and/or "type")', field="all"
        )
    if body.id is not None:
        if body.cursor is not None:
            raise RequestError("a cursor continues an all or filter redrive, not one by id", field="cursor")
        moved, skipped = await ops.retry.dead.redrive_message(body.id)
        # 404 when none is there (or another call is moving it back now); a corrupt one is there, and
        # answered as the filter form answers it: 200, skipped.
        if not moved and not skipped:
            raise RequestError.not_found(f"no dead letter for message {body.id!r}", field="id")
        done = Redriven(moved, skipped, None)
    else:
        try:
            done = await redrive(ops.retry, Filter(topic=body.topic, type=body.type), cursor=body.cursor)
        except ValueError as exc:
            raise _bad_cursor(exc) from None
    return {
        "redriven": done.moved,
        "skipped": done.skipped,
        "stillDead": ops.retry.dead_count,
        "nextCursor": done.cursor,
    }


def admin_routes(app: FastAPI, ops: AdminOps) -> None:
    _read_routes(app, ops)
    _write_routes(app, ops)


def _listing_route(
    app: FastAPI, name: str, sources: dict[str | None, _Source], summary: str, query: dict[str, Any]
) -> None:
    """GET /v1/admin/<name>: a listing read by ``_listing``."""

    async def listing(request: Request) -> Response:
        return _listing(request, sources)

    app.get(f"{PREFIX}/{name}", summary=summary, responses=_errors(), openapi_extra=query, name=name)(listing)


def _read_routes(app: FastAPI, ops: AdminOps) -> None:
    retry_sources: dict[str | None, _Source] = {  # the first: the default state
        "pending": (functools.partial(pending_page, ops.retry), pending_view),
        "dead": (functools.partial(dead_page, ops.retry), dead_view),
    }

    @app.get(
        f"{PREFIX}/stats",
        summary="Admin: store depths and ages, brokers, replay on recovery",
        responses={401: _errors()[401]},
    )
    async def stats() -> Response:
        return _json(stats_view(ops))

    _listing_route(
        app, "retries", retry_sources,
        "Admin: pending messages (state=pending, by next attempt) or dead letters (state=dead)",
        _query("state", "topic", "type", "dueAfter", "dueBefore", "limit", "cursor"),
    )  # fmt: skip
    _listing_route(
        app, "scheduled", {None: (functools.partial(scheduled_page, ops.delay), scheduled_view)},
        "Admin: scheduled (delayed) messages by due time",
        _query("topic", "type", "dueAfter", "dueBefore", "limit", "cursor"),
    )  # fmt: skip
    if ops.transactions is not None:
        _listing_route(
            app, "transactions", ops.transactions.sources,
            "Admin: open transactions (state=open: undecided or not acknowledged) or all, by id",
            _query("state", "topic", "limit", "cursor", states=("open", "all")),
        )  # fmt: skip

    @app.get(
        f"{PREFIX}/messages/{{id}}",
        summary="Admin: one message with its attempt history",
        responses=_errors(404),
    )
    async def message(id: str) -> Response:
        found = message_view(ops, id)
        if found is None:
            return problem_response(
                RequestError.not_found(f"no pending, dead or scheduled message {id!r}", field="id")
            )
        return _json(found)


def _write_routes(app: FastAPI, ops: AdminOps) -> None:
    @app.post(
        f"{PREFIX}/dead-letters:redrive",
        summary="Admin: move dead letters back to pending, due now",
        responses=_errors(404, 503),
        openapi_extra=_json_body(RedriveIn),
    )
    async def redrive_dead_route(request: Request) -> Response:
        try:
            done = await redrive_dead(ops, await parse_body(request, RedriveIn))
        except Exception as exc:
            return problem_response(exc)
        return _json(done)

    @app.post(
        f"{PREFIX}/retries:replay",
        status_code=202,
        summary="Admin: replay pending messages now",
        responses=_errors(),
        openapi_extra=_json_body(ReplayIn),
    )
    async def replay_now(request: Request) -> Response:
        try:
            body: ReplayIn = await parse_body(request, ReplayIn)
        except Exception as exc:
            return problem_response(exc)
        pending = ops.retry.pending_count
        ops.recovery.trigger(body.topic, reason="replay requested through the admin API")
        return _json({"replaying": pending > 0, "topic": body.topic, "pending": pending}, 202)

    @app.post(
        f"{PREFIX}/retries:purge",
        summary="Admin: delete pending or dead messages for good (confirm=yes)",
        responses=_errors(503),
        openapi_extra=_json_body(PurgeIn, **_query("confirm")),
    )
    async def purge_retries(request: Request) -> Response:
        try:
            body: PurgeIn = await parse_body(request, PurgeIn)
            if request.query_params.get("confirm") != "yes":
                raise RequestError(
                    "purging deletes messages for good: repeat the request with ?confirm=yes", field="confirm"
                )
            where = Filter(body.topic, body.type, body.due_after, body.due_before)
            deleted, skipped = await purge(ops.retry, body.state, where, in_flight=ops.replay.is_in_flight)
        except Exception as exc:
            return problem_response(exc)
        return _json({"deleted": deleted, "skippedInFlight": skipped})
