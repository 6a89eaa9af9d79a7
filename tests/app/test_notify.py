"""The built-in dead-letter hook: log line, counter, webhook; webhook failures never lose the letter."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator

import pytest

from rocksidecar.app.notify import DeadLetterNotifier
from rocksidecar.retry.store import RetryStore
from tests.app.test_http_client import App
from tests.retry.conftest import Harness, make_harness, record


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = make_harness()  # the retry store's harness (tests/retry/conftest.py), without a replay loop
    yield harness
    await harness.store.close()


@contextlib.asynccontextmanager
async def webhook(status: int = 204) -> AsyncIterator[tuple[App, int]]:
    """A real webhook on loopback (test_http_client's app): it records each request and answers ``status``."""
    hook = App(lambda _h, _b: b"HTTP/1.1 %d X\r\ncontent-length: 0\r\n\r\n" % status)
    server = await asyncio.start_server(hook.serve, "127.0.0.1", 0)
    async with server:
        yield hook, server.sockets[0].getsockname()[1]


async def bury_one(store: RetryStore) -> None:
    key = await store.spool(record("M1"))
    await store.bury(key, record("M1").failed(1, "SystemBusy"), "retries exhausted")


async def test_posts_the_dead_letter_as_json_and_counts_by_type(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    counts: list[str] = []
    async with webhook() as (hook, port):
        notifier = DeadLetterNotifier(count=counts.append, webhook_url=f"http://127.0.0.1:{port}/dl")
        store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
        with caplog.at_level(logging.ERROR, logger="rocksidecar.app.notify"):
            await bury_one(store)
        await notifier.close()
    received = [json.loads(body) for _, body in hook.requests]
    assert hook.requests[0][0].startswith(b"POST /dl HTTP/1.1\r\n")
    assert b"content-type: application/json" in hook.requests[0][0]
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


@pytest.mark.parametrize("status", [500, 302])  # a redirect is not followed, so not delivered
async def test_an_answer_other_than_2xx_counts_as_failure(h: Harness, status: int) -> None:
    async with webhook(status) as (hook, port):
        notifier = DeadLetterNotifier(webhook_url=f"http://127.0.0.1:{port}/dl")
        store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
        await bury_one(store)
        await notifier.close()
    assert len(hook.requests) == 1
    assert (notifier.posted, notifier.failed) == (0, 1)


async def test_credentials_in_the_url_become_basic_authorization_not_host(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    async with webhook(500) as (hook, port):
        notifier = DeadLetterNotifier(webhook_url=f"http://ops:s%40cret@127.0.0.1:{port}/dl")
        store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
        with caplog.at_level(logging.WARNING, logger="rocksidecar.app.notify"):
            await bury_one(store)
            await notifier.close()
    head = hook.requests[0][0].decode("latin-1")
    assert f"Host: 127.0.0.1:{port}\r\n" in head
    assert "authorization: Basic b3BzOnNAY3JldA==\r\n" in head  # base64 of "ops:s@cret"
    assert "cret" not in caplog.text  # the failure's log line names the URL without its password


async def test_a_url_that_is_not_http_fails_the_post_not_the_letter(h: Harness) -> None:
    notifier = DeadLetterNotifier(webhook_url="ftp://127.0.0.1/dl")
    store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
    await bury_one(store)
    await notifier.close()
    assert (notifier.posted, notifier.failed) == (0, 1)
    assert [d.id for d in store.dead.page()] == ["M1"]
