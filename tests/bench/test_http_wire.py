"""The benchmarks' HTTP peers read one message at a time off a keep-alive connection."""

from __future__ import annotations

import asyncio

from bench.http_wire import read_message


def test_messages_are_read_one_by_one_framed_by_their_content_length() -> None:
    async def run() -> list[tuple[bytes, bytes]]:
        reader = asyncio.StreamReader()
        reader.feed_data(b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 204 No Content\r\n\r\n")
        reader.feed_eof()
        return [await read_message(reader), await read_message(reader)]

    first, second = asyncio.run(run())
    assert first == (b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\n", b"abc")
    assert second == (b"HTTP/1.1 204 No Content\r\n\r\n", b"")
