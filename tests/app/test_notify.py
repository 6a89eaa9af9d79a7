"""The built-in dead-letter hook: log line, counter, webhook; webhook failures never lose the letter."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from rocksidecar.app.notify import DeadLetterNotifier
from rocksidecar.retry.store import RetryStore
from tests.retry.conftest import Harness, make_harness, record


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = make_harness()  # the retry store's harness (tests/retry/conftest.py), without a replay loop
    yield harness
    await harness.store.close()


async def bury_one(store: RetryStore) -> None:
    key = await store.spool(record("M1"))
    await store.bury(key, record("M1").failed(1, "SystemBusy"), "retries exhausted")


async def test_posts_the_dead_letter_as_json_and_counts_by_type(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        received.append(json.loads(request.content))
        return httpx.Response(204)

    counts: list[str] = []
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    notifier = DeadLetterNotifier(count=counts.append, webhook_url="http://hooks.test/dl", client=client)
    store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
    with caplog.at_level(logging.ERROR, logger="rocksidecar.app.notify"):
        await bury_one(store)
    await notifier.close()
    await client.aclose()
    assert counts == ["orders"]
    [doc] = received
    assert (doc["event"], doc["id"], doc["reason"], doc["body_text"]) == (
        "dead_letter",
        "M1",
        "retries exhausted",
        "body of M1",
    )
    assert notifier.posted == 1
    assert "dead letter id=M1" in caplog.text


async def test_webhook_failures_are_logged_and_the_letter_stays(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as sock:  # a port nobody listens on: connection refused, for real
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    notifier = DeadLetterNotifier(webhook_url=f"http://127.0.0.1:{port}/dl", timeout_s=2.0)
    store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
    with caplog.at_level(logging.WARNING, logger="rocksidecar.app.notify"):
        await bury_one(store)
        await notifier.close()
    assert notifier.failed == 1
    assert "webhook" in caplog.text
    assert [d.id for d in store.dead.page()] == ["M1"]


async def test_http_error_status_counts_as_failure(h: Harness) -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(500)))
    notifier = DeadLetterNotifier(webhook_url="http://hooks.test/dl", client=client)
    store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
    await bury_one(store)
    await notifier.close()
    await client.aclose()
    assert (notifier.posted, notifier.failed) == (0, 1)
