"""DeadLetterNotifier: the built-in dead-letter hook (R4): a log line, a counter and an optional webhook.

The webhook is posted in the background; its failures are logged and never touch the dead letter,
which is already stored when the hook runs.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable
from urllib.parse import unquote, urlsplit, urlunsplit

import orjson

from rocksidecar.retry.dead_letter import DeadLetter

from .http_client import HttpClient, PostError

WEBHOOK_ANSWER_BYTES = 64 * 1024

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 5.0
MAX_PENDING_POSTS = 100  # beyond this, webhook posts are skipped (and logged), not queued without end
# ... and beyond this many bytes held by pending posts: a hung webhook and a storm of 4 MiB letters held
# ~128 MiB a post (12.8 GB for 100). A post's JSON is held three times over (ours, the request the client
# builds from it, the socket's write buffer while the webhook does not read), so it counts three times.
MAX_PENDING_BYTES = 64 * 1024 * 1024
HELD_COPIES = 3
# a body past this is posted as body_base64 only (body_text null, body_text_omitted true): its text
# copy would double the post (or more: JSON writes a control character as 6 bytes), and the base64
# already carries every byte
MAX_BODY_TEXT_BYTES = 64 * 1024


class DeadLetterNotifier:
    """Pass an instance as RetryStore(on_dead_letter=...). ``count(type)`` feeds a metric."""

    def __init__(
        self,
        *,
        count: Callable[[str], None] | None = None,
        webhook_url: str = "",
        client: HttpClient | None = None,
        timeout_s: float = WEBHOOK_TIMEOUT_S,
        max_pending: int = MAX_PENDING_POSTS,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        log_each: bool = True,
    ) -> None:
        self._log_each = log_each  # False: the caller logs dead letters itself (throttled)
        self._count = count
        self._url, self._headers = _split_credentials(webhook_url)
        self._owns_client = client is None and bool(webhook_url)
        # The webhook's answer is read for its status only: 64 KiB of it at most, so that 100 posts
        # waiting on a slow webhook hold little of what it sends back (4 MiB each by default).
        if client is None and webhook_url:
            client = HttpClient(max_answer_bytes=WEBHOOK_ANSWER_BYTES)
        self._client = client
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._max_pending_bytes = max_pending_bytes
        self._pending_bytes = 0  # what the pending posts count for (HELD_COPIES times their JSON)
        self._posts: set[asyncio.Task[None]] = set()
        self.posted = 0
        self.failed = 0

    def __call__(self, letter: DeadLetter) -> None:
        record = letter.record
        type_ = record.type if record is not None else "corrupt"
        if self._log_each:
            log.error(
                "dead letter id=%s topic=%s type=%s attempts=%s reason=%s",
                letter.id,
                record.topic if record is not None else "?",
                type_,
                record.retry_count if record is not None else "?",
                letter.reason,
            )
        if self._count is not None:
            try:
                self._count(type_)
            except Exception:
                log.exception("dead-letter counter failed")
        if self._client is None:
            return
        if len(self._posts) >= self._max_pending:
            self._skip(letter.id, f"{len(self._posts)} posts pending")
            return
        # the base64 of the body alone is a lower bound of the post: a letter that cannot fit is skipped
        # before it is encoded
        raw = len(record.body) if record is not None else len(letter.raw)
        if self._posts and self._pending_bytes + HELD_COPIES * 4 * ((raw + 2) // 3) > self._max_pending_bytes:
            self._skip(letter.id, f"{self._pending_bytes >> 20} MiB pending")
            return
        # copied to a bytes of its own size: orjson reserves for the worst case (~12 bytes a character of
        # a long string) and keeps that reservation, 63 MiB for the 5 MiB post of a 4 MiB body
        body = bytes(memoryview(orjson.dumps(_webhook_doc(letter))))
        cost = HELD_COPIES * len(body)
        # one post is always let through when none is pending: a letter larger than the bound alone
        # (max_body_bytes may be 64 MiB) is still posted while the webhook keeps up
        if self._posts and self._pending_bytes + cost > self._max_pending_bytes:
            self._skip(letter.id, f"{self._pending_bytes >> 20} MiB pending")
            return
        self._pending_bytes += cost
        task = asyncio.get_running_loop().create_task(self._post(letter.id, body))
        self._posts.add(task)
        task.add_done_callback(lambda done: self._done(done, cost))

    def _skip(self, id_: str, why: str) -> None:
        self.failed += 1
        log.warning("dead-letter webhook backlog full (%s); not posting %s", why, id_)

    def _done(self, task: asyncio.Task[None], cost: int) -> None:
        self._posts.discard(task)
        self._pending_bytes -= cost

    async def _post(self, id_: str, body: bytes) -> None:
        assert self._client is not None
        try:
            answer = await self._client.post(self._url, body, self._headers, self._timeout_s)
        except (PostError, ValueError) as exc:  # ValueError: a URL no client could use (a bad port)
            self._failed(id_, str(exc))
            return
        if not 200 <= answer.status < 300:  # a redirect is not followed: not delivered either
            self._failed(id_, f"answered {answer.status}")
            return
        self.posted += 1

    def _failed(self, id_: str, why: str) -> None:
        self.failed += 1
        log.warning("dead-letter webhook %s failed for %s: %s", self._url, id_, why)

    async def drain(self) -> None:
        """Wait for the webhook posts in progress (each bounded by the timeout)."""
        if self._posts:
            await asyncio.gather(*list(self._posts), return_exceptions=True)

    async def close(self) -> None:
        await self.drain()
        if self._owns_client and self._client is not None:
            await self._client.close()


def _webhook_doc(letter: DeadLetter) -> dict[str, object]:
    """What the webhook is posted: the dead letter's JSON (as the CLI's), without the text copy of a
    large body."""
    doc: dict[str, object] = {"event": "dead_letter", **letter.to_json()}
    record = letter.record
    if record is not None and len(record.body) > MAX_BODY_TEXT_BYTES and doc.get("body_text") is not None:
        doc["body_text"] = None
        doc["body_text_omitted"] = True
    return doc


def _split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """The URL without user:password@, and the headers of a post: a webhook URL's credentials become
    Basic authorization, as curl and httpx send them, and never appear in Host or in a log line."""
    headers = {"content-type": "application/json"}
    parts = urlsplit(url)
    if parts.username is None:
        return url, headers
    secret = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    headers["authorization"] = "Basic " + base64.b64encode(secret).decode("ascii")
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])), headers
