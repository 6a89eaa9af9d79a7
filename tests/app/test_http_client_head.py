"""The answer's head is bounded (size and header count), and a failed or timed-out POST keeps nothing:
an app streaming endless headers must not grow the sidecar (issue 27).

Interim answers (1xx: 100 Continue, 103 Early Hints) are not the answer: RFC 9110 15.2 has a client skip
them and read the final one (session 13). Taken as the answer, a 1xx failed the delivery, and the final
answer that followed was read as the answer to the next request on the pooled connection: a message the
app never answered could be acked by another one's 200."""

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


LARGE_HEADS = {
    # few headers, one of them huge and never finished: the parser would hold it all
    "one-huge-header": b"HTTP/1.1 200 OK\r\nx-big: " + b"v" * (MAX_HEAD_BYTES + 1024),
    # interim answers without end: each is skipped, their bytes count toward the bound all the same
    "endless-interim": b"HTTP/1.1 100 Continue\r\n\r\n" * (MAX_HEAD_BYTES // 25 + 1024),
}


@pytest.mark.parametrize("head", LARGE_HEADS.values(), ids=LARGE_HEADS.keys())
async def test_a_head_larger_than_the_bound_fails_the_post(
    serve: Callable[..., Awaitable[str]], head: bytes
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head)
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


# --- interim answers (session 13) ------------------------------------------------------------------
REQUEST_END = b"\r\n\r\nx"  # a request's head and the one-byte body the tests POST
INTERIM = [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>\r\n\r\n"]
FINAL = b"HTTP/1.1 201 Created\r\nx-final: yes\r\ncontent-length: 2\r\n\r\nok"


@pytest.mark.parametrize("interim", INTERIM)
@pytest.mark.parametrize("apart", [False, True], ids=["one-write", "two-writes"])
async def test_an_interim_answer_is_skipped_for_the_final_one(
    serve: Callable[..., Awaitable[str]], interim: bytes, apart: bool
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)  # the body
        writer.write(interim + interim)
        if apart:
            await writer.drain()
            await asyncio.sleep(0)
        writer.write(FINAL)
        await writer.drain()
        await reader.read()

    client = HttpClient()
    got = await client.post(await serve(answer), b"x", {}, 5.0)
    assert (got.status, got.body) == (201, b"ok")
    assert dict(got.headers) == {"x-final": "yes", "content-length": "2"}  # the final answer's alone
    await client.close()


async def test_a_late_final_answer_is_never_the_next_requests_answer(
    serve: Callable[..., Awaitable[str]],
) -> None:
    """The app answers 100 at once and its final 200 later; the next POST on that connection is answered
    500. Before: the first POST returned 100, the second took the first's 200."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        with contextlib.suppress(TimeoutError):  # a client that took the 100 sends its next POST now
            await asyncio.wait_for(reader.readuntil(REQUEST_END), 0.5)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")  # the first POST's, late
            await writer.drain()
            await reader.read()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        await reader.readuntil(REQUEST_END)
        writer.write(b"HTTP/1.1 500 Nope\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()

    url = await serve(answer)
    client = HttpClient()
    first = await client.post(url, b"x", {}, 5.0)
    second = await client.post(url, b"x", {}, 5.0)
    assert (first.status, second.status) == (200, 500)
    await client.close()


@pytest.mark.parametrize("upgrade", [b"upgrade: h2c\r\nconnection: upgrade\r\n", b""])
async def test_switching_protocols_fails_the_post_at_once(
    serve: Callable[..., Awaitable[str]], upgrade: bytes
) -> None:
    """101 is no answer to a POST. With an Upgrade header, httptools raised HttpParserUpgrade (not one of
    its HttpParserErrors) out of data_received: asyncio logged a fatal error and the POST waited for its
    whole timeout."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\n" + upgrade + b"\r\n")
        await writer.drain()
        await reader.read()

    client = HttpClient()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(PostError) as info:
        await client.post(await serve(answer), b"x", {}, 30.0)
    assert "no answer within" not in str(info.value) and loop.time() - started < 10
    await client.close()


# --- a chunked answer's trailers (review of session 14) ----------------------------------------------
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
ENDLESS_TRAILERS = {
    # the body ends at once, then one trailer value without end: httptools kept appending it (quadratic)
    "endless-value": b"0\r\nx-t: ",
    "endless-name": b"3\r\nabc\r\n0\r\nx-",
}


@pytest.mark.parametrize("start", ENDLESS_TRAILERS.values(), ids=ENDLESS_TRAILERS.keys())
async def test_an_endless_trailer_fails_the_post_as_an_endless_head_does(
    serve: Callable[..., Awaitable[str]], start: bytes
) -> None:
    """The head's bound did not cover trailers: the POST took its whole timeout, the sidecar growing."""
    closed = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(CHUNKED_HEAD + start)
            sent = 0
            while sent < ENDLESS_CAP:
                writer.write(b"a" * 65536)
                sent += 65536
                await writer.drain()  # raises once the client has closed
            await reader.read()
        finally:
            writer.transport.abort()
            closed.set()

    client = HttpClient()
    with pytest.raises(PostError, match=f"head and trailers are larger than {MAX_HEAD_BYTES} bytes"):
        await client.post(await serve(answer), b"x", {}, 10.0)
    await closed.wait()
    await client.close()


async def test_trailers_and_tiny_chunks_within_the_bounds_are_an_answer(
    serve: Callable[..., Awaitable[str]],
) -> None:
    """Only trailers count against the head's bound, not the chunks' framing: 30 000 one-byte chunks
    (150 KB of size lines and line ends) are an answer, their last chunk and trailers in writes of their
    own."""
    n = 30_000
    chunks = b"1\r\na\r\n" * n

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(1)  # the body
        parts = [CHUNKED_HEAD, chunks[:-3], chunks[-3:], b"0\r\n", b"x-t: ", b"v" * 1000 + b"\r\n", b"\r\n"]
        for part in parts:
            writer.write(part)
            await writer.drain()
        await reader.read()

    client = HttpClient()
    got = await client.post(await serve(answer), b"x", {}, 10.0)
    assert (got.status, got.body) == (200, b"a" * n)
    assert got.headers["x-t"] == "v" * 1000  # a trailer is read as a header
    await client.close()


async def test_a_client_asking_for_less_refuses_a_longer_answer_body(
    serve: Callable[..., Awaitable[str]],
) -> None:
    """The dead-letter webhook's and the transaction check's clients read 64 KiB of an answer at most
    (app.notify, app.transactions.parts): a longer body fails the request, where the default client
    takes 4 MiB."""
    body = b"x" * 2048

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        await reader.read()

    small = HttpClient(max_answer_bytes=1024)
    with pytest.raises(PostError, match="answer is larger than 1024 bytes"):
        await small.post(await serve(answer), b"x", {}, 5.0)
    await small.close()
    default = HttpClient()
    got = await default.post(await serve(answer), b"x", {}, 5.0)
    assert got.status == 200 and got.body == body
    await default.close()


def test_the_dead_letter_webhook_reads_a_small_answer() -> None:
    from rocksidecar.app.notify import WEBHOOK_ANSWER_BYTES, DeadLetterNotifier

    notifier = DeadLetterNotifier(webhook_url="http://127.0.0.1:1/hook")
    assert (
        notifier._client is not None
        and notifier._client._max_answer_bytes == WEBHOOK_ANSWER_BYTES == 64 * 1024
    )
