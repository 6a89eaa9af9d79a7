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

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 5.0
MAX_PENDING_POSTS = 100  # beyond this, webhook posts are skipped (and logged), not queued without end


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
        log_each: bool = True,
    ) -> None:
        self._log_each = log_each  # False: the caller logs dead letters itself (throttled)
        self._count = count
        self._url, self._headers = _split_credentials(webhook_url)
        self._owns_client = client is None and bool(webhook_url)
        self._client = client if client is not None or not webhook_url else HttpClient()
        self._timeout_s = timeout_s
        self._max_pending = max_pending
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
            self.failed += 1
            log.warning("dead-letter webhook backlog full; not posting %s", letter.id)
            return
        task = asyncio.get_running_loop().create_task(
            self._post({"event": "dead_letter", **letter.to_json()})
        )
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)

    async def _post(self, doc: dict[str, object]) -> None:
        assert self._client is not None
        try:
            answer = await self._client.post(self._url, orjson.dumps(doc), self._headers, self._timeout_s)
        except (PostError, ValueError) as exc:  # ValueError: a URL no client could use (a bad port)
            self._failed(doc, str(exc))
            return
        if not 200 <= answer.status < 300:  # a redirect is not followed: not delivered either
            self._failed(doc, f"answered {answer.status}")
            return
        self.posted += 1

    def _failed(self, doc: dict[str, object], why: str) -> None:
        self.failed += 1
        log.warning("dead-letter webhook %s failed for %s: %s", self._url, doc.get("id"), why)

    async def drain(self) -> None:
        """Wait for the webhook posts in progress (each bounded by the timeout)."""
        if self._posts:
            await asyncio.gather(*list(self._posts), return_exceptions=True)

    async def close(self) -> None:
        await self.drain()
        if self._owns_client and self._client is not None:
            await self._client.close()


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
