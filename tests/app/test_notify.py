"""The built-in dead-letter hook: log line, counter, webhook; webhook failures never lose the letter."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import json
import logging
import socket
import tracemalloc
from collections.abc import AsyncIterator

import pytest

from rocksidecar.app.notify import DeadLetterNotifier
from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.record import RetryRecord
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


MAX_PENDING_BYTES = 64 * 1024 * 1024  # the README's bound on what pending posts hold
MAX_BODY_TEXT_BYTES = 64 * 1024  # the README's: a larger body is posted without body_text


@contextlib.asynccontextmanager
async def hung_webhook() -> AsyncIterator[int]:
    """A webhook that accepts connections and never reads nor answers: its posts stay pending."""

    writers: list[asyncio.StreamWriter] = []

    async def hang(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in writers:  # closed here: a server waits for its connections when it closes
            writer.close()
        server.close()
        await server.wait_closed()


async def cancel_posts(notifier: DeadLetterNotifier) -> None:
    posts = list(notifier._posts)
    for post in posts:
        post.cancel()
    await asyncio.gather(*posts, return_exceptions=True)
    await notifier.close()


async def test_a_storm_against_a_hung_webhook_holds_bounded_memory() -> None:
    """Twelve 4 MiB letters (NUL bodies: valid UTF-8, six JSON bytes a byte as text) held 1.5 GB of
    pending posts; the posts' bytes are bounded now, and the letters past the bound are skipped."""
    body = 4 * 1024 * 1024  # max_body_bytes' default
    async with hung_webhook() as port:
        notifier = DeadLetterNotifier(webhook_url=f"http://127.0.0.1:{port}/dl", timeout_s=30.0)
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for i in range(12):
                notifier(
                    DeadLetter(b"k", "refused", 1, b"", RetryRecord(id=f"M{i}", topic="o", body=b"\0" * body))
                )
            for _ in range(20):  # the posts connect and write what the socket takes
                await asyncio.sleep(0.01)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        pending = len(notifier._posts)
        await cancel_posts(notifier)
    assert held < MAX_PENDING_BYTES + body, f"held {held >> 20} MiB"
    assert 1 <= pending < 12 and notifier.failed == 12 - pending
    assert notifier._pending_bytes == 0  # every finished post gave its bytes back


async def test_past_the_byte_bound_a_post_is_skipped_and_the_letter_stays(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    async with hung_webhook() as port:
        # one post is let through whatever its size, when none is pending; the next ones wait for it
        notifier = DeadLetterNotifier(webhook_url=f"http://127.0.0.1:{port}/dl", max_pending_bytes=1)
        store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=notifier)
        with caplog.at_level(logging.WARNING, logger="rocksidecar.app.notify"):
            for id_ in ("M1", "M2", "M3"):
                key = await store.spool(record(id_))
                await store.bury(key, record(id_).failed(1, "SystemBusy"), "retries exhausted")
        pending = len(notifier._posts)
        await cancel_posts(notifier)
    assert (pending, notifier.failed) == (1, 2)
    assert "backlog full" in caplog.text and "not posting M3" in caplog.text
    assert sorted(d.id for d in store.dead.page()) == ["M1", "M2", "M3"]


async def test_a_large_body_is_posted_as_base64_only() -> None:
    large = "é" * (MAX_BODY_TEXT_BYTES // 2 + 1)  # UTF-8 text one byte past the bound
    async with webhook() as (hook, port):
        notifier = DeadLetterNotifier(webhook_url=f"http://127.0.0.1:{port}/dl")
        for id_, text in (("big", large), ("small", "é" * 10)):
            notifier(DeadLetter(b"k", "refused", 1, b"", RetryRecord(id=id_, topic="o", body=text.encode())))
        await notifier.close()
    docs = {doc["id"]: doc for doc in (json.loads(body) for _, body in hook.requests)}
    big, small = docs["big"], docs["small"]
    assert (big["body_text"], big["body_text_omitted"]) == (None, True)
    assert base64.b64decode(big["body_base64"]).decode() == large  # every byte is still there
    assert small["body_text"] == "é" * 10 and "body_text_omitted" not in small
