"""Idempotency-Key (S6): the same key within the window returns the first answer and sends nothing.

Answers are kept in the local store (synced through the group-commit writer before they are returned),
so a client retrying after a timeout or a sidecar restart gets the same id back instead of a duplicate.
A concurrent repeat waits for the first request's answer. Answers that a retry could improve are not
kept: 5xx, 409, 429, and batch answers with FAILED items (e.g. the store was briefly full).

A first request's send and the keeping of its answer run in a task of their own, which its caller awaits
shielded: a client that gives up (a gRPC deadline or cancel cancels its handler; an HTTP stop past its
grace) leaves the send to finish within its own timeouts and its answer kept, so the retry that follows
gets that answer instead of sending again. The service's stop waits for such tasks, then cancels them
(IdempotencyStore.close). At most MAX_GONE_SENDS such sends run on at once; past that, a send whose
caller leaves is cancelled with it, as before (a retry then computes afresh).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from rocksidecar.rmq.throttle import RepeatLog
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV, Delete, Put

from .request import RequestError

log = logging.getLogger(__name__)
Answer = tuple[int, dict[str, Any]]
CF_ANSWERS = "idem"
CF_EXPIRY = "idem_expiry"  # created_ms (13 digits) + key -> b"", to purge old answers in time order
COLUMN_FAMILIES = (CF_ANSWERS, CF_EXPIRY)
MAX_KEY_CHARS = 255  # the one rule for both APIs (gRPC sends "" for "no key": proto3 has no absence)
# Each distinct key a client sends leaves an answer until the purge drops it, so the purge must outpace
# any client: the expiry index sorts by time, so a round reads only expired entries, PURGE_CHUNK at a
# time (one short hold of the event loop each: ~5 ms on RocksDB), and goes on while chunks come back
# full, up to PURGE_ROUND a round. A round every PURGE_EVERY_S drops up to 50 000 answers a second, what
# IdempotencyStore.run itself takes in without any API in front (a full round: ~17 s of chunks, yielding):
# an answer outlives the window by a round or so. (Once an hour with 10 000 a round, the answers of more
# than 2.8 keys a second stayed for ever.)
PURGE_CHUNK = 1_000
PURGE_ROUND = 3_000_000
PURGE_EVERY_S = 60.0
# Sends left running after their callers went away (see above), at most, over all connections. Nothing
# else bounds them: grpc frees a call's stream as its client gives up, so one client with a deadline
# shorter than a slow broker's answers would pile up sends, each holding a message of up to 5 MiB, at its
# request rate. Before such sends ran on, the handler's cancel ended them and one connection's stream cap
# (app.api.servers.MAX_STREAMS_PER_CONNECTION, 100) bounded them; this keeps what they hold below what one
# connection's live calls may hold, while the few a client's deadline leaves behind at a time (the case
# they run on for: its retry follows at once) stay well within it.
MAX_GONE_SENDS = 64


class KeyRefused(RequestError):
    """A request refused for its idempotency key (bad, or reused with another request): bad input, that
    the edges count as they count other bad input; what else answer_once raises (the stop's 503, a
    compute's error) is not."""


def check_key(key: str, field: str = "Idempotency-Key") -> None:
    """An idempotency key is 1-255 characters on either API; KeyRefused naming ``field`` (the API's
    name for it: the HTTP header, gRPC's idempotency_key) otherwise."""
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise KeyRefused(f"{field} must be 1-{MAX_KEY_CHARS} characters", field=field)


async def answer_once(
    store: IdempotencyStore | None,
    key: str | None,
    request_fingerprint: Callable[[], Awaitable[str]],
    compute: Callable[[], Awaitable[Answer]],
    *,
    field: str,
    legacy_fingerprint: Callable[[], str] | None = None,
) -> tuple[Answer, bool]:
    """``compute``'s answer, through the store when a key is given: (answer, whether it was replayed).
    Raises KeyRefused naming ``field`` for a bad key or a key reused with another request.
    ``legacy_fingerprint``: the request's fingerprint as an earlier version computed it (see
    IdempotencyStore.run)."""
    if key is None or store is None:
        return await compute(), False
    check_key(key, field)
    computed = False

    async def first() -> Answer:
        nonlocal computed
        computed = True
        return await compute()

    answer = await store.run(
        key, await request_fingerprint(), first, field=field, legacy_fp=legacy_fingerprint
    )
    return answer, not computed


def canonical_json(body: bytes) -> bytes:
    """The JSON document in one form (no spacing, keys sorted), so that a retry that re-serialises the
    same request is recognised; the bytes as they are when they are not JSON orjson can read."""
    try:
        return orjson.dumps(orjson.loads(body), option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return body


def fingerprint(path: str, query: str, body: bytes) -> str:
    """What makes two requests "the same": route, query and body bytes."""
    return hashlib.sha256(path.encode() + b"?" + query.encode() + b"\n" + body).hexdigest()


def _check_same(first_fp: str, fp: str, field: str) -> None:
    if first_fp != fp:
        raise KeyRefused(
            f"this {field} was used with a different request",
            status=422,
            field=field,
            title="Idempotency-Key reused",
        )


def final(answer: Answer) -> bool:
    """Whether repeating the request could only give this answer again."""
    status, body = answer
    return status < 500 and status not in (409, 429) and not body.get("failed")


class _FirstGone(Exception):
    """The request a repeat waited on was cancelled before it had an answer (the stop, or its caller's
    leaving past MAX_GONE_SENDS, cancels it)."""


def _decoded(raw: bytes) -> tuple[int, str, Answer] | None:
    """(created_ms, fingerprint, answer) of a kept answer as _keep writes it; None when the value is
    damaged (bit rot, a hand edit): not JSON, or a field missing or of another type."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    created, fp, status, body = (doc.get(name) for name in ("created_ms", "fp", "status", "body"))
    if type(created) is not int or not isinstance(fp, str) or type(status) is not int:
        return None
    return (created, fp, (status, body)) if isinstance(body, dict) else None


def damaged_answer(field: str) -> RequestError:
    # Replayed, the client would take it for the first request's answer; computed afresh, the message
    # might go twice. Neither: refused until the purge forgets it with the window (then a new key).
    return RequestError(
        f"the answer kept for this {field} is damaged: whether the first request was carried out is "
        "unknown; it is forgotten once the idempotency window is over",
        status=500,
        field=field,
        title="Damaged answer",
    )


def _stopping(field: str) -> RequestError:
    return RequestError(
        "the sidecar is stopping: the request was not answered; retry it with the same key",
        status=503,
        field=field,
        title="Stopping",
    )


class IdempotencyStore:
    def __init__(
        self, kv: KV, writer: GroupCommitWriter, *, window_s: float, now_ms: Callable[[], int]
    ) -> None:
        self._kv = kv
        self._writer = writer
        self._window_ms = int(window_s * 1000)
        self._now_ms = now_ms
        # key -> (fingerprint, future of the first request's answer)
        self._inflight: dict[str, tuple[str, asyncio.Future[Answer]]] = {}
        # The first requests' sends and keeps, detached from their callers: close() ends what is left.
        self._firsts: set[asyncio.Task[Answer]] = set()
        self._gone: set[asyncio.Task[Answer]] = set()  # those of them whose callers went away
        self._closed = False
        self._damaged = RepeatLog()  # damaged answers met: one line, then a summary per window

    def _stored(self, key: str, field: str) -> tuple[str, Answer] | None:
        """The fingerprint and answer kept for ``key`` in the window; RequestError (500) when damaged."""
        raw = self._kv.get(CF_ANSWERS, key.encode())
        if raw is None:
            return None
        kept = _decoded(raw)
        if kept is None:
            self._damaged.warning(log, ("replay",), "the answer kept for Idempotency-Key %r is damaged", key)
            raise damaged_answer(field)
        created_ms, fp, answer = kept
        if self._now_ms() - created_ms > self._window_ms:
            return None
        return fp, answer

    async def run(
        self,
        key: str,
        fp: str,
        compute: Callable[[], Awaitable[Answer]],
        field: str = "Idempotency-Key",
        legacy_fp: Callable[[], str] | None = None,
    ) -> Answer:
        """``compute``'s answer once per ``key`` (``fp``: the request's fingerprint). ``legacy_fp``: the
        request's fingerprint as an earlier version computed it, asked only when a kept answer's differs
        from ``fp``: that answer is this request's too when it matches (an answer kept before an upgrade
        changed the rule, replayed to the retry that follows the upgrade rather than refused 422)."""
        while (pending := self._inflight.get(key)) is not None:
            # A concurrent repeat gets the first answer only if it is the same request: a different
            # body under the same key would otherwise be answered 2xx and never stored.
            _check_same(pending[0], fp, field)
            try:
                return await asyncio.shield(pending[1])
            except _FirstGone:
                continue  # the first's send was cancelled, not this call: answer it as a first
        stored = self._stored(key, field)
        if stored is not None:
            kept_fp, answer = stored
            if kept_fp != fp and (legacy_fp is None or kept_fp != legacy_fp()):
                _check_same(kept_fp, fp, field)
            return answer
        if self._closed:  # the APIs stopped first: nothing is sent that close() would not wait for
            raise _stopping(field)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Answer] = loop.create_future()  # the repeats': the answer once kept
        sent: asyncio.Future[Answer] = loop.create_future()  # the answer as soon as known: the message went
        self._inflight[key] = (fp, fut)
        first = asyncio.ensure_future(self._first(key, fp, compute, fut, sent))
        self._firsts.add(first)
        first.add_done_callback(self._first_done)
        try:
            # Shielded: this caller cancelled (its client gave up) does not cancel the send, whose
            # message the broker may already hold; its answer is kept for the retry that follows.
            return await asyncio.shield(first)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not first.cancelled() or (task is not None and task.cancelling()):
                self._caller_gone(first, sent)
                raise  # this caller was cancelled: it is gone, nothing is owed to it
            # close() cancelled the first request while this caller still waited. Its message went if
            # it has an answer (it was cut short keeping it): that answer is this caller's, as it is a
            # repeat's (503 would tell the client a stored message failed, and its retry would send it
            # again). Else an answer an edge maps (a CancelledError of its own would leave a gRPC call
            # with no status at all).
            if sent.done():
                return sent.result()
            raise _stopping(field) from None

    async def _first(
        self,
        key: str,
        fp: str,
        compute: Callable[[], Awaitable[Answer]],
        fut: asyncio.Future[Answer],
        sent: asyncio.Future[Answer],
    ) -> Answer:
        """A first request's answer, kept when final; the repeats meanwhile wait on ``fut``, set once the
        answer is kept (``sent`` as soon as it is known)."""
        try:
            answer = await compute()
        except BaseException as exc:
            del self._inflight[key]
            # Cancelled (by close(), or as its caller left past MAX_GONE_SENDS): a repeat waiting here
            # computes its own answer (refused, once the store is closed). Any other error is the
            # repeats' too.
            fut.set_exception(_FirstGone() if isinstance(exc, asyncio.CancelledError) else exc)
            fut.exception()  # waiters re-raise it; nobody else has to look
            raise
        sent.set_result(answer)  # the message went: a repeat from now on gets this answer, never sends
        try:
            if final(answer):
                # In flight until the answer is kept: meanwhile the key is not stored yet, and a client
                # retrying at once would send again.
                await self._keep(key, fp, answer)
        finally:
            del self._inflight[key]
            # The repeats are answered only now: answered before the answer is kept, a SIGKILL in between
            # had the restarted sidecar send the message again under the key whose answer a client holds.
            # (Cut short keeping it, by close(), they get it all the same: 503 would have them resend.)
            fut.set_result(answer)
        return answer

    def _caller_gone(self, first: asyncio.Task[Answer], answered: asyncio.Future[Answer]) -> None:
        """``first``'s caller went away: its send runs on for the retry, unless MAX_GONE_SENDS do already;
        then it is cancelled, as the caller was (a repeat waiting on it, or coming, computes afresh). One
        whose answer is known already is only keeping it (a local write): that ends on its own, and
        cancelled, the retry would send again."""
        if first.done():
            return
        if len(self._gone) < MAX_GONE_SENDS or answered.done():
            self._gone.add(first)
        else:
            first.cancel()

    def _first_done(self, first: asyncio.Task[Answer]) -> None:
        self._firsts.discard(first)
        self._gone.discard(first)
        if not first.cancelled():
            first.exception()  # its caller re-raised it, or is gone: no "exception was never retrieved"

    async def close(self, grace_s: float) -> None:
        """After the APIs stopped: the sends whose callers went away are given ``grace_s`` to finish
        (their own timeouts bound them too), then cancelled; no first request starts from here on."""
        self._closed = True
        if not self._firsts:
            return
        _, left = await asyncio.wait(set(self._firsts), timeout=grace_s)
        for first in left:
            first.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    async def _keep(self, key: str, fp: str, answer: Answer) -> None:
        now = self._now_ms()
        doc = orjson.dumps({"fp": fp, "created_ms": now, "status": answer[0], "body": answer[1]})
        try:
            await self._writer.write(
                [Put(CF_ANSWERS, key.encode(), doc), Put(CF_EXPIRY, b"%013d" % now + key.encode(), b"")]
            )
        except StorageError as exc:
            # The message itself is stored (that is what the answer says); only the dedupe record is lost.
            log.warning("could not keep the answer for Idempotency-Key %r: %s", key, exc)

    async def purge(self, limit: int = PURGE_CHUNK, round_limit: int = PURGE_ROUND) -> int:
        """One round: forget answers older than the window, oldest first, ``limit`` index entries a
        chunk, until the first entry still in the window or ``round_limit`` entries (the next round
        goes on from the oldest left). How many index entries it dropped."""
        upper = b"%013d" % (self._now_ms() - self._window_ms)
        lower: bytes | None = None
        dropped = 0
        while dropped < round_limit:
            # Only expired entries come back (the index sorts by time): a short chunk is the last one.
            expired = self._kv.scan(
                CF_EXPIRY, lower=lower, upper=upper, limit=min(limit, round_limit - dropped)
            )
            if not expired:
                break
            keys = [index_key[13:] for index_key, _ in expired]
            ops: list[Put | Delete] = []
            inflight = self._inflight
            for (index_key, _), key, raw in zip(
                expired, keys, self._kv.get_many(CF_ANSWERS, keys), strict=True
            ):
                # A key in flight may have a new answer queued in the writer, not applied yet (behind a
                # sync): what was read here is the old one, and a Delete queued after that Put would
                # drop the new answer (a retry would send again). Left to the next round, when the new
                # answer is read (a key stays in flight until its answer is written). No await from
                # the read to the queueing of the deletes (writer.write queues before it awaits): a
                # key that goes in flight after this check has its Put queued after these Deletes.
                if inflight and key.decode(errors="surrogateescape") in inflight:
                    continue
                # A newer answer under the same key has its own, later index entry: keep it. A damaged
                # one, whose time is unknown, goes with its key's first expired entry (kept, it stopped
                # every round here, the oldest entry, and its key answered 500 for ever).
                kept = _decoded(raw) if raw is not None else None
                if raw is not None and (kept is None or kept[0] == int(index_key[:13])):
                    if kept is None:
                        self._damaged.warning(log, ("purge",), "a damaged kept answer dropped: %r", key)
                    ops.append(Delete(CF_ANSWERS, key))
                ops.append(Delete(CF_EXPIRY, index_key))
                dropped += 1
            await self._writer.write(ops)
            if len(expired) < limit:
                break
            lower = expired[-1][0] + b"\x00"  # past what this chunk deleted, whatever a scan sees of it
            await asyncio.sleep(0)  # between chunks, the rest of the loop's work (sends) runs
        return dropped
