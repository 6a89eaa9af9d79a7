"""DeadLetterNotifier: the built-in dead-letter hook (R4): a log line, a counter and an optional webhook.

The webhook is posted in the background; its failures are logged and never touch the dead letter,
which is already stored when the hook runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx

from rocksidecar.retry.dead_letter import DeadLetter

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
        client: httpx.AsyncClient | None = None,
        timeout_s: float = WEBHOOK_TIMEOUT_S,
        max_pending: int = MAX_PENDING_POSTS,
        log_each: bool = True,
    ) -> None:
        self._log_each = log_each  # False: the caller logs dead letters itself (throttled)
        self._count = count
        self._url = webhook_url
        self._owns_client = client is None and bool(webhook_url)
        self._client = client if client is not None or not webhook_url else httpx.AsyncClient()
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
            response = await self._client.post(self._url, json=doc, timeout=self._timeout_s)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self.failed += 1
            log.warning("dead-letter webhook %s failed for %s: %s", self._url, doc.get("id"), exc)
            return
        self.posted += 1

    async def drain(self) -> None:
        """Wait for the webhook posts in progress (each bounded by the timeout)."""
        if self._posts:
            await asyncio.gather(*list(self._posts), return_exceptions=True)

    async def close(self) -> None:
        await self.drain()
        if self._owns_client and self._client is not None:
            await self._client.aclose()
