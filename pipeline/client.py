"""A small synchronous client for the sidecar's POST /v1/messages:batch: it repeats a request (same
bytes, same Idempotency-Key) after 429, 5xx or a transport error, waiting per Retry-After or back-off,
and returns one result per message. It only talks HTTP, so an executor needs no RocketMQ client."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# httpx, not app's hand-written client (app/http_client.py): this package runs in Spark executors and
# imports nothing of app/; it is synchronous, off the sidecar's hot path, and an executor's network may
# need a proxy (httpx honours HTTP(S)_PROXY).
import httpx
import orjson

from .backoff import Backoff, parse_retry_after
from .deadline import read_within

log = logging.getLogger(__name__)
BATCH_PATH = "/v1/messages:batch"
STORED = frozenset({"SENT", "SPOOLED", "SCHEDULED"})  # answered 2xx: kept by a broker or the sidecar
STATUSES = STORED | {"REJECTED", "FAILED"}  # every status a batch item may be answered
REPLAYED_HEADER = "Idempotent-Replayed"  # the sidecar repeated an earlier answer: nothing was sent now
# The most an answer to n messages may take, as sent and as decoded: an item is a few hundred bytes (an
# error's text included), a problem document (4xx, 5xx) a few; more is a peer that does not stop.
ANSWER_BASE_BYTES = 64 * 1024
ANSWER_ITEM_BYTES = 4 * 1024
# An encoded answer is decoded this many bytes at a time, so that one step's output stays small however
# large the whole would be (a bomb): <= 256 KiB for gzip (1:1032), <= 8 MiB for zstd (4 bytes of a
# run-length block make 128 KiB); past the bound decoding stops.
DECODE_STEP_BYTES = 256


class SidecarError(Exception):
    """The sidecar refused the request as a whole (4xx), or answered something this client does not
    understand. Repeating the same request cannot help."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GaveUpError(SidecarError):
    """Still unavailable (429, 5xx, transport errors) after the allowed retries."""


def _retried(status: int) -> bool:
    """An answer the sidecar may not give the next time: waited out and the request repeated."""
    return status == 429 or status >= 500


def _steps(raw: bytes) -> Iterator[bytes]:
    for start in range(0, len(raw), DECODE_STEP_BYTES):
        yield raw[start : start + DECODE_STEP_BYTES]


@dataclass(frozen=True, slots=True)
class ItemResult:
    status: str  # SENT | SPOOLED | SCHEDULED | REJECTED | FAILED
    id: str | None = None
    error: str | None = None  # "field: detail" for REJECTED and FAILED
    replayed: bool = False  # the answer of an earlier request with the same Idempotency-Key

    @property
    def stored(self) -> bool:
        return self.status in STORED


def _problem_text(resp: httpx.Response) -> str:
    try:
        doc = resp.json()
    except ValueError:
        return resp.text[:500]
    if not isinstance(doc, dict):
        return str(doc)[:500]
    field = f" (field {doc['field']})" if doc.get("field") else ""
    return f"{doc.get('title', '')}: {doc.get('detail', '')}{field}"


def _item(doc: dict[str, Any], replayed: bool) -> ItemResult:
    error = doc.get("error")
    text = None
    if isinstance(error, dict):
        text = f"{error.get('field') or ''}: {error.get('detail') or error.get('title') or ''}".lstrip(": ")
    return ItemResult(str(doc.get("status")), doc.get("id"), text, replayed)


class SidecarClient:
    def __init__(
        self,
        endpoint: str,
        *,
        token: str = "",
        timeout_s: float = 30.0,
        max_retries: int = 20,
        backoff: Backoff | None = None,
        ack: str | None = None,
        user_agent: str = "rocksidecar-spark",
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Content-Type": "application/json", "User-Agent": user_agent}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # No connection is kept alive: bytes a faulty peer (a proxy, a broken server) sends past an
        # answer's end would be read as the answer to the next batch, which could then be taken as stored
        # though the sidecar never saw it (or answered 503). A connection per batch of up to 500
        # messages costs a TCP (and TLS) handshake and a socket in TIME_WAIT per batch, little next to
        # the batch. (Checking that an answer is the one asked for, the sidecar echoing the
        # Idempotency-Key, would also catch a peer mixing answers up, at the price of an API change.)
        self._http = httpx.Client(
            base_url=endpoint,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self.timeout_s = timeout_s
        self._params = {"ack": ack} if ack else None
        self.max_retries = max_retries
        self.backoff = backoff or Backoff()
        self._sleep = sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SidecarClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pause(self, attempt: int) -> None:
        """Wait before retry number ``attempt`` + 1 of something the sidecar could not do yet."""
        self._sleep(self.backoff.delay(attempt))

    def post_batch(self, messages: Sequence[dict[str, Any]], key: str | None = None) -> list[ItemResult]:
        """One result per message, in order. Raises SidecarError (4xx), GaveUpError."""
        return self.post_encoded([orjson.dumps(m) for m in messages], key)

    def post_encoded(self, messages: Sequence[bytes], key: str | None = None) -> list[ItemResult]:
        """post_batch for messages already encoded as JSON objects."""
        body = b'{"messages":[' + b",".join(messages) + b"]}"
        headers = {"Idempotency-Key": key} if key else None
        for attempt in range(self.max_retries + 1):
            unsendable = False
            try:
                resp = self._exchange(body, headers, len(messages))
            except httpx.LocalProtocolError:
                unsendable = True
            except httpx.TransportError as exc:
                reason, retry_after = f"{type(exc).__name__}: {exc}", None
            else:
                if resp.status_code == 200:
                    return self._results(resp, len(messages))
                if not _retried(resp.status_code):
                    raise SidecarError(
                        f"the sidecar refused the batch ({resp.status_code}): {_problem_text(resp)}",
                        resp.status_code,
                    )
                reason = f"{resp.status_code} {_problem_text(resp)}"
                retry_after = parse_retry_after(resp.headers.get("Retry-After"), time.time())
            if unsendable:
                # Our own request cannot be sent (h11 refuses a header value: the token or the key), so
                # repeating it cannot help. The library's text quotes the header, bearer token and all:
                # raised here, outside the except clause, so that it is not even this error's context.
                raise SidecarError(
                    "this client cannot send its request (LocalProtocolError: a header value is not valid "
                    "HTTP; option token and the Idempotency-Key must be printable ASCII without spaces)"
                )
            if attempt == self.max_retries:
                break
            wait = self.backoff.delay(attempt, retry_after)
            log.warning("sidecar unavailable (%s); retry %d in %.2fs (%s)", reason, attempt + 1, wait, key)
            self._sleep(wait)
        raise GaveUpError(f"the sidecar stayed unavailable after {self.max_retries} retries: {reason}")

    def _exchange(self, body: bytes, headers: dict[str, str] | None, count: int) -> httpx.Response:
        """One POST, its answer (to ``count`` messages) read in full within ``timeout_s`` of the start.
        httpx's timeout bounds each socket operation, not the request: a sidecar (or a proxy) answering a
        byte at a time would hold the task for ever. So the answer is streamed, the deadline checked as
        each piece arrives, and past it httpx.ReadTimeout is raised, which the caller retries as any
        timeout. A request so ends within ``timeout_s`` plus one socket read (itself bounded by
        ``timeout_s``); only the status line and headers, which httpx reads before handing the answer
        over, are bounded per read alone. The answer's size is bounded too (see _decoded)."""
        deadline = time.monotonic() + self.timeout_s
        most = ANSWER_BASE_BYTES + ANSWER_ITEM_BYTES * count
        request = self._http.build_request(
            "POST", BATCH_PATH, content=body, headers=headers, params=self._params
        )
        resp = self._http.send(request, stream=True)
        if resp.is_stream_consumed:  # a transport that hands over an answer read already (MockTransport)
            return resp
        try:
            raw = read_within(resp.iter_raw(), deadline, most)
        finally:
            resp.close()
        if raw is None:
            raise httpx.ReadTimeout(
                f"no complete answer within {self.timeout_s:g} s (option timeout)", request=request
            )
        return self._decoded(resp, raw, most)

    @staticmethod
    def _decoded(resp: httpx.Response, raw: bytes, most: int) -> httpx.Response:
        """The answer whose body came as ``raw``, decoded as its Content-Encoding says. An answer longer
        than ``most`` bytes (as sent or decoded), or whose body does not decode, is a peer's fault: a
        429 or 5xx is still taken by its status (waited out, repeated) with its body left out; any other
        raises SidecarError (a 200 whose results cannot be read is not a success)."""
        request = resp.request
        headers = resp.headers.copy()
        problem = f"over {most} bytes" if len(raw) > most else ""
        if not problem:
            # decoded a step at a time (httpx decodes what it is given in one go) with the size checked
            answer = httpx.Response(resp.status_code, headers=headers, content=_steps(raw), request=request)
            decoded: list[bytes] = []
            size = 0
            try:
                for piece in answer.iter_bytes():
                    decoded.append(piece)
                    size += len(piece)
                    if size > most:
                        problem = f"over {most} bytes once decoded"
                        break
            except httpx.DecodingError as exc:
                problem = f"not {headers.get('Content-Encoding')!r} as labelled: {exc}"
            raw = b"".join(decoded)
        # the body as decoded: the new Response must not decode it again
        headers.pop("Content-Encoding", None)
        if not problem:
            return httpx.Response(resp.status_code, headers=headers, content=raw, request=request)
        if _retried(resp.status_code):
            text = f"(the answer's body is {problem})".encode()
            return httpx.Response(resp.status_code, headers=headers, content=text, request=request)
        raise SidecarError(f"unreadable answer ({resp.status_code}): its body is {problem}", resp.status_code)

    @staticmethod
    def _results(resp: httpx.Response, expected: int) -> list[ItemResult]:
        """One result per message, checked item by item: a message the answer does not account for (no
        result with its index, more than one, or a status this client does not know) is FAILED. It was
        not confirmed stored, so it is posted again (and the task fails if that never works) rather than
        counted as published, or dropped from the counts."""
        replayed = resp.headers.get(REPLAYED_HEADER, "").lower() == "true"
        try:
            items = resp.json()["results"]
            if not isinstance(items, list) or not all(isinstance(r, dict) for r in items):
                raise TypeError("results is not a list of objects")
        except (ValueError, KeyError, TypeError) as exc:
            raise SidecarError(f"unreadable batch answer: {exc}: {resp.text[:200]}", 200) from exc
        if len(items) != expected:
            raise SidecarError(f"the batch answer has {len(items)} results for {expected} messages", 200)
        found: list[list[dict[str, Any]]] = [[] for _ in range(expected)]
        for r in items:
            index = r.get("index")
            # a bool is an int to Python, not to the sidecar; an index out of range answers no message
            if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < expected:
                found[index].append(r)
        results: list[ItemResult] = []
        unaccounted: list[str] = []
        for index, answers in enumerate(found):
            status = answers[0].get("status") if len(answers) == 1 else None
            # a status of another JSON type (a list, an object) is unknown too, not a crash
            if isinstance(status, str) and status in STATUSES:
                results.append(_item(answers[0], replayed))
                continue
            if len(answers) == 1:
                why = f"the unknown status {str(status)[:40]!r}"
            else:
                why = f"{len(answers) or 'no'} results"
            unaccounted.append(f"the sidecar's answer has {why} for message {index}")
            results.append(ItemResult("FAILED", None, unaccounted[-1]))
        if unaccounted:
            log.warning(
                "a batch answer does not account for %d of %d messages (%s): taken as FAILED",
                len(unaccounted),
                expected,
                "; ".join(unaccounted[:5]),
            )
        return results
