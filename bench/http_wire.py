"""Reading one HTTP/1.1 message off a keep-alive connection, for the benchmarks' own tiny HTTP peers.

No imports beyond asyncio: the load generator runs as its own light process. Bodies are framed by
content-length only (the peers here never send chunked bodies).
"""

from __future__ import annotations

import asyncio


async def read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next message's head (through the blank line) and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return head, await reader.readexactly(length)
