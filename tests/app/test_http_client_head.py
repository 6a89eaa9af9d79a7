"""The answer's head is bounded (size and header count), and a failed or timed-out POST keeps nothing:
an app streaming endless headers must not grow the sidecar (issue 27)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from rocksidecar.app.http_client import MAX_HEAD_BYTES, MAX_HEADERS, HttpClient, PostError

Answerer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Answerer], Awaitable[str]]]:
    """A raw asyncio server: ``answer`` runs once the request's head is read; the URL to POST to."""
    servers: list[asyncio.Server] = []

    async def start(answer: Answerer) -> str:
        async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                await reader.readuntil(b"\r\n\r\n")
                await answer(reader, writer)
            writer.close()

        server = await asyncio.start_server(conn, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/in"

    yield start
    for s in servers:
        s.close()


def _headers(n: int, value_len: int, start: int = 0) -> bytes:
    return b"".join(b"x-h%d: %s\r\n" % (start + i, b"v" * value_len) for i in range(n))


async def test_more_headers_than_the_bound_fail_the_post_and_close(
    serve: Callable[..., Awaitable[str]],
) -> None:
    closed = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n" + _headers(MAX_HEADERS + 1, 4) + b"content-length: 0\r\n\r\n")
        await writer.drain()
        while await reader.read(65536):  # until the client closes the connection
            pass
        closed.set()

    url = await serve(answer)
    client = HttpClient()
    with pytest.raises(PostError, match=f"more than {MAX_HEADERS} headers"):
        await client.post(url, b"x", {}, 5.0)
    await closed.wait()
    await client.close()


async def test_exactly_the_bound_of_headers_is_an_answer(serve: Callable[..., Awaitable[str]]) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n" + _headers(MAX_HEADERS - 1, 4) + b"content-length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()

    client = HttpClient()
    answer_ = await client.post(await serve(answer), b"x", {}, 5.0)
    assert answer_.status == 200 and len(answer_.headers) == MAX_HEADERS
    await client.close()


async def test_a_head_larger_than_the_bound_fails_the_post(serve: Callable[..., Awaitable[str]]) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # few headers, one of them huge and never finished: the parser would hold it all
        writer.write(b"HTTP/1.1 200 OK\r\nx-big: " + b"v" * (MAX_HEAD_BYTES + 1024))
        await writer.drain()
        await reader.read()

    client = HttpClient()
    with pytest.raises(PostError, match=f"head is larger than {MAX_HEAD_BYTES} bytes"):
        await client.post(await serve(answer), b"x", {}, 5.0)
    await client.close()


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """service.py raises the GC thresholds so high that cycles live on for long: here, for ever."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _retained(posts: Callable[[], Awaitable[None]]) -> tuple[int, int]:
    """Bytes still allocated by the client after ``posts`` (against before), and the process's peak above
    before. Only the client's own lines count as retained (tracemalloc names the innermost Python line, so
    what httptools allocates for a callback counts too): the test's app and other tests' leftovers that
    the loop frees meanwhile are not the client's memory."""
    await posts()  # warm up: connections, parsers, caches
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        first = tracemalloc.take_snapshot()
        tracemalloc.reset_peak()
        await posts()
        _, peak = tracemalloc.get_traced_memory()
        last = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    client = [tracemalloc.Filter(True, "*app/http_client.py")]
    grown = last.filter_traces(client).compare_to(first.filter_traces(client), "filename")
    return sum(stat.size_diff for stat in grown), peak - before


N = 10
ENDLESS_CAP = 4 * 1024 * 1024  # per connection: "endless" to the client, bounded if it never stops reading


async def test_endless_headers_to_many_posts_keep_memory_flat(serve: Callable[..., Awaitable[str]]) -> None:
    ended = 0
    all_ended = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal ended
        try:
            writer.write(b"HTTP/1.1 200 OK\r\n")
            sent, i = 0, 0
            while sent < ENDLESS_CAP:
                chunk = _headers(64, 200, i)  # distinct names: every one would be kept
                i += 64
                writer.write(chunk)
                sent += len(chunk)
                await writer.drain()  # raises once the client has closed
            await reader.read()
        finally:
            writer.transport.abort()  # the app's own buffers are not the sidecar's memory
            ended += 1
            if ended % N == 0:
                all_ended.set()

    url = await serve(answer)
    client = HttpClient()

    async def posts() -> None:
        all_ended.clear()
        results = await asyncio.gather(
            *(client.post(url, b"x", {}, 2.0) for _ in range(N)), return_exceptions=True
        )
        assert all(isinstance(r, PostError) for r in results), results
        await all_ended.wait()

    with _no_cyclic_gc():
        retained, peak = await _retained(posts)
    await client.close()
    assert retained < 256 * 1024, retained
    assert peak < N * 2 * (MAX_HEAD_BYTES + 65536) + 1024 * 1024, peak  # each POST stops at its bound


async def test_timed_out_posts_keep_nothing_of_their_half_read_head(
    serve: Callable[..., Awaitable[str]],
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # just under both bounds, then silence: the POST times out holding a parsed head
        writer.write(b"HTTP/1.1 200 OK\r\n" + _headers(MAX_HEADERS - 10, 500))
        await writer.drain()
        await reader.read()

    url = await serve(answer)
    client = HttpClient()

    async def posts() -> None:
        results = await asyncio.gather(
            *(client.post(url, b"x", {}, 0.1) for _ in range(N)), return_exceptions=True
        )
        assert all(isinstance(r, PostError) and "no answer" in str(r) for r in results), results

    with _no_cyclic_gc():
        retained, _ = await _retained(posts)
    await client.close()
    # each POST had ~50 KB of headers parsed: kept, ten would be ~500 KB
    assert retained < 128 * 1024, retained
