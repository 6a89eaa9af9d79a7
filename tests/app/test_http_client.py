"""HttpClient against a real local server: keep-alive reuse, answers of every framing, errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from rocksidecar.app.http_client import HttpClient, PostError

Handler = Callable[[bytes, bytes], bytes | None]  # (head, body) -> raw answer, None: close at once


class App:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                self.requests.append((head, body))
                answer = self.handler(head, body)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


AppFactory = Callable[[Handler], Awaitable[tuple[App, str]]]


@pytest.fixture
async def app_factory() -> AsyncIterator[AppFactory]:
    servers: list[asyncio.Server] = []

    async def make(handler: Handler) -> tuple[App, str]:
        app = App(handler)
        server = await asyncio.start_server(app.serve, "127.0.0.1", 0)
        servers.append(server)
        return app, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/in?x=1"

    yield make
    for s in servers:
        s.close()


NO_CONTENT = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"


async def test_keep_alive_reuses_one_connection_and_sends_exact_request(app_factory: AppFactory) -> None:
    app, url = await app_factory(lambda _h, _b: NO_CONTENT)
    client = HttpClient()
    for i in range(5):
        answer = await client.post(url, b"body%d" % i, {"ce-id": f"id{i}"}, 5.0)
        assert answer.status == 204
    assert app.connections == 1
    head, body = app.requests[3]
    assert body == b"body3"
    assert head.startswith(b"POST /in?x=1 HTTP/1.1\r\n")
    assert b"\r\nce-id: id3\r\n" in head and b"\r\ncontent-length: 5\r\n" in head
    await client.close()


async def test_concurrent_posts_each_get_their_own_connection(app_factory: AppFactory) -> None:
    app, url = await app_factory(lambda _h, _b: NO_CONTENT)
    client = HttpClient()
    answers = await asyncio.gather(*(client.post(url, b"x", {}, 5.0) for _ in range(4)))
    assert [a.status for a in answers] == [204] * 4 and app.connections == 4
    await asyncio.gather(*(client.post(url, b"x", {}, 5.0) for _ in range(4)))
    assert app.connections == 4  # all four went back to the pool
    await client.close()


async def test_chunked_and_sized_bodies_are_read_and_headers_kept(app_factory: AppFactory) -> None:
    answers = [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\ncontent-length: 3\r\n\r\nno!",
        NO_CONTENT,
    ]
    app, url = await app_factory(lambda _h, _b: answers.pop(0))
    client = HttpClient()
    assert (await client.post(url, b"a", {}, 5.0)).status == 200
    later = await client.post(url, b"b", {}, 5.0)
    assert later.status == 429 and later.headers["retry-after"] == "7"
    # decoded on first use (issue 32), then a plain mapping: names lower-cased, in the answer's order
    assert dict(later.headers) == {"retry-after": "7", "content-length": "3"}
    assert list(later.headers) == ["retry-after", "content-length"] and len(later.headers) == 2
    assert later.headers.get("content-type") is None and "Retry-After" not in later.headers
    assert (await client.post(url, b"c", {}, 5.0)).status == 204
    assert app.connections == 1
    await client.close()


async def test_connection_close_answer_is_not_reused(app_factory: AppFactory) -> None:
    close = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    app, url = await app_factory(lambda _h, _b: close)
    client = HttpClient()
    for _ in range(3):
        assert (await client.post(url, b"x", {}, 5.0)).status == 200
    assert app.connections == 3
    await client.close()


async def test_idle_connection_the_app_dropped_is_replaced(app_factory: AppFactory) -> None:
    app, url = await app_factory(lambda _h, _b: NO_CONTENT)
    client = HttpClient()
    assert (await client.post(url, b"x", {}, 5.0)).status == 204
    app.writers[0].transport.abort()  # the app's idle timeout
    await asyncio.sleep(0)  # let the reset reach the client side's transport
    assert (await client.post(url, b"y", {}, 5.0)).status == 204
    assert app.connections == 2 and app.requests[-1][1] == b"y"
    await client.close()


async def test_app_closing_without_an_answer_is_an_error(app_factory: AppFactory) -> None:
    _app, url = await app_factory(lambda _h, _b: None)
    client = HttpClient()
    with pytest.raises(PostError, match="closed the connection"):
        await client.post(url, b"x", {}, 5.0)
    await client.close()


async def test_no_answer_within_the_timeout_is_an_error(app_factory: AppFactory) -> None:
    _app, url = await app_factory(lambda _h, _b: b"")  # reads, never answers
    client = HttpClient()
    with pytest.raises(PostError, match=r"no answer within 0\.05 s"):
        await client.post(url, b"x", {}, 0.05)
    await client.close()


async def test_a_timeout_fails_its_post_and_leaves_the_caller_uncancelled(app_factory: AppFactory) -> None:
    answers = [b"", NO_CONTENT]  # the first POST is read and never answered
    app, url = await app_factory(lambda _h, _b: answers.pop(0))
    client = HttpClient()
    with pytest.raises(PostError, match=r"no answer within 0\.05 s"):
        await client.post(url, b"x", {}, 0.05)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the timeout was not a cancel of the caller
    assert (await client.post(url, b"y", {}, 5.0)).status == 204  # on a new connection: the late one closed
    assert app.connections == 2
    await asyncio.sleep(0)  # the caller can still await: nothing cancels it later
    await client.close()


async def test_refused_connection_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        client = HttpClient()
        with pytest.raises(PostError, match="ConnectionRefused"):
            await client.post(f"http://127.0.0.1:{port}/", b"x", {}, 5.0)
        await client.close()


async def test_malformed_answer_is_an_error(app_factory: AppFactory) -> None:
    _app, url = await app_factory(lambda _h, _b: b"NOT HTTP AT ALL\r\n\r\n")
    client = HttpClient()
    with pytest.raises(PostError):
        await client.post(url, b"x", {}, 5.0)
    await client.close()


async def test_header_with_a_line_break_is_refused_before_sending(app_factory: AppFactory) -> None:
    app, url = await app_factory(lambda _h, _b: NO_CONTENT)
    client = HttpClient()
    with pytest.raises(PostError, match="line break"):
        await client.post(url, b"x", {"content-type": "a\r\nx-evil: 1"}, 5.0)
    assert app.connections == 0
    await client.close()


async def test_a_get_changes_only_the_request_line_and_other_methods_and_schemes_are_refused(
    app_factory: AppFactory,
) -> None:
    app, url = await app_factory(lambda _h, _b: b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
    client = HttpClient()
    try:
        answer = await client.request(url, b"", {"accept": "application/json"}, 5.0, "GET")
        await client.post(url, b"x", {}, 5.0)  # the same target: its POST head is untouched
        with pytest.raises(ValueError, match="HEAD"):
            await client.request(url, b"", {}, 5.0, "HEAD")  # the parser would wait for a body
        with pytest.raises(PostError, match="not an http or https URL"):
            await client.post("ftp://127.0.0.1/x", b"", {}, 5.0)
    finally:
        await client.close()
    assert answer.body == b"{}"
    assert app.requests[0][0].startswith(b"GET /in?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"accept: application/json\r\ncontent-length: 0\r\n\r\n" in app.requests[0][0]
    assert app.requests[1][0].startswith(b"POST /in?x=1 HTTP/1.1\r\n")


@pytest.mark.parametrize(
    "lines",
    [b"a: 1\r\n\r\nGET /evil HTTP/1.1\r\n", b"\r\na: 1\r\n", b"a: 1\nb: 2\r\n", b"a: 1\rb: 2\r\n", b"a: 1"],
)
async def test_header_lines_that_are_not_just_header_lines_are_refused(
    app_factory: AppFactory, lines: bytes
) -> None:
    app, url = await app_factory(lambda _h, _b: NO_CONTENT)
    client = HttpClient()
    with pytest.raises(PostError, match="line break"):
        await client.post_lines(url, lines, b"x", 5.0)
    assert (await client.post_lines(url, b"a: 1\r\nb: 2\r\n", b"x", 5.0)).status == 204
    assert app.connections == 1 and app.requests[0][0].endswith(b"a: 1\r\nb: 2\r\ncontent-length: 1\r\n\r\n")
    await client.close()
