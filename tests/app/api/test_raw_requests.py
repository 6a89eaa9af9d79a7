"""Random raw HTTP/1.1 at a running sidecar (`make slow`): requests built from the routes' own shapes,
odd JSON values, framing (Content-Length right, wrong, negative or huge; chunked, well-formed or not;
Expect; pipelining) and a share of byte-level mutations. Whatever arrives: no 5xx, nothing logged as an
error, and the sidecar answers afterwards. A lingering close wrote uvicorn's 400 past its FIN, an error
logged per connection, until e9f7095 (test_http_edge keeps that request)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

import pytest

from tests.app.conftest import logged_errors

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CONNECTIONS = 80  # ~0.6 s each: most end with a "Connection: close"; the others after 5 s kept alive
SEED = 20261129
FIXED_BODIES = [
    b'{"topic": "T", "body": "x"}',
    b'[{"topic":"T","body":"x"}]',
    b'{"messages":[{"topic":"T","body":"a"}]}',
    b"",
    b"{",
    b"\xff\xfe",
    b'{"topic":"T","bodyBase64":"!!"}',
]
PATHS = [
    "/v1/messages/abc", "/healthz", "/readyz", "/metrics", "/ui", "/docs", "/openapi.json", "/v1/admin/retry",
    "/v1/messages?x=1", "//v1/messages", "/v1/messages%00", "*", "/v1/messages/" + "a" * 5000,
    "http://127.0.0.1/v1/messages",
]  # fmt: skip
METHODS = ["POST"] * 6 + [
    "GET",
    "PUT",
    "DELETE",
    "HEAD",
    "OPTIONS",
    "PATCH",
    "CONNECT",
    "TRACE",
    "POSTX",
    "post",
]
FIELDS = ["topic", "body", "bodyBase64", "tags", "keys", "properties", "delayMs", "deliverAt", "id",
          "shardingKey", "messages", "traceparent", "contentType", "idempotencyKey", "x"]  # fmt: skip


def value(rnd: random.Random, depth: int = 0) -> object:
    """A JSON value of the kinds that break parsers: extreme numbers, lone surrogates, huge strings."""
    kind = rnd.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rnd.choice([0, -1, 2**31, 2**63, -(2**63) - 1, 10**30, 86_400_000 * 400, 0.5, 1e308, -0.0])
    if kind == 1:
        return rnd.choice(["", "T", "a" * 300, "\u00e9", "\ud800", "%RETRY%x", "T/x", "x" * 70_000, "AAAA"])
    if kind == 2:
        return rnd.choice([True, False, None])
    if kind == 3:
        return "".join(rnd.choice('ab\x00\n"\\ \u2028') for _ in range(rnd.randrange(10)))
    if kind == 4:
        return rnd.randrange(-5, 5)
    if kind in (5, 6):
        return {rnd.choice(FIELDS): value(rnd, depth + 1) for _ in range(rnd.randrange(6))}
    return [value(rnd, depth + 1) for _ in range(rnd.randrange(4))]


def body(rnd: random.Random) -> bytes:
    if rnd.random() < 0.5:
        return rnd.choice(FIXED_BODIES)
    doc = value(rnd)
    if rnd.random() < 0.7:  # most near a valid send, one odd field or more
        doc = {"topic": "T", "body": "x", **(doc if isinstance(doc, dict) else {"properties": doc})}
    return json.dumps(doc).encode("utf-8", "surrogatepass")


def chunked(rnd: random.Random, data: bytes) -> bytes:
    parts = []
    while data:
        n = rnd.randrange(1, 8)
        size = b"%x" % n if rnd.random() < 0.9 else b"%d" % n
        parts.append(size + b"\r\n" + data[:n] + b"\r\n")
        data = data[n:]
    return b"".join(parts) + rnd.choice([b"0\r\n\r\n", b"0\r\nX: y\r\n\r\n", b"", b"zz\r\n"])


def mutate(rnd: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rnd.randrange(1, 4)):
        if not out:
            break
        i = rnd.randrange(len(out))
        op = rnd.randrange(4)
        if op == 0:
            out[i] = rnd.randrange(256)
        elif op == 1:
            del out[i]
        elif op == 2:
            out[i:i] = bytes([rnd.choice(b'\r\n: \x00,;"\\')])
        else:
            j = rnd.randrange(len(out))
            out[i:i] = out[j : j + rnd.randrange(1, 20)]
    return bytes(out)


def request(rnd: random.Random, last: bool) -> bytes:
    """Half the time one part of the request is odd (method, path, version, host, content type,
    framing, extra headers or its bytes), the rest as a client would send it; the body is odd in half."""
    odd = rnd.randrange(16)  # 8 and above: no part odd but the body, maybe
    content = body(rnd) if rnd.random() < 0.5 else rnd.choice([FIXED_BODIES[0], FIXED_BODIES[1]])
    headers = [(b"Connection", b"close")] if last and rnd.random() < 0.8 else []
    hosts = [b"localhost", b"evil.com", b"", b"127.0.0.1:1"]
    headers.append((b"Host", rnd.choice(hosts) if odd == 0 else b"127.0.0.1"))
    kinds = [b"text/plain", b"application/json; charset=utf-8", b"application/x-ndjson", b"application/JSON"]
    if odd != 1 or rnd.random() < 0.5:
        headers.append((b"Content-Type", rnd.choice(kinds) if odd == 1 else b"application/json"))
    is_chunked = odd == 2 and rnd.random() < 0.6
    if is_chunked:
        codings = [b"chunked", b"gzip, chunked", b"chunked, gzip", b"identity"]
        headers.append((b"Transfer-Encoding", rnd.choice(codings)))
        content = chunked(rnd, content)
    if not is_chunked or rnd.random() < 0.2:  # both: a smuggling attempt
        lengths = [len(content) + 5, max(len(content) - 3, 0), -1, 2**64, 0, len(content)]
        headers.append((b"Content-Length", str(rnd.choice(lengths) if odd == 2 else len(content)).encode()))
    if odd == 3:
        extra = [(b"Expect", b"100-continue"), (b"Connection", b"upgrade"), (b"Connection", b"keep-alive"),
                 (b"Idempotency-Key", bytes(rnd.randrange(32, 127) for _ in range(rnd.randrange(300)))),
                 (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                 (b"traceparent", b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01"), (b"traceparent", b"zz"),
                 (b"Content-Length", b"5"), (b"Host", b"127.0.0.1")]  # fmt: skip
        headers += rnd.sample(extra, rnd.randrange(1, 4))
    rnd.shuffle(headers)
    method = rnd.choice(METHODS) if odd == 4 else b"POST"
    path = rnd.choice(PATHS) if odd == 5 else rnd.choice(["/v1/messages", "/v1/messages:batch"])
    version = rnd.choice([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"HTTP/1.2"]) if odd == 6 else b"HTTP/1.1"
    head = b"%s %s %s\r\n" % (method.encode() if isinstance(method, str) else method, path.encode(), version)
    raw = head + b"".join(name + b": " + v + b"\r\n" for name, v in headers) + b"\r\n" + content
    return mutate(rnd, raw) if odd == 7 else raw


async def test_any_raw_request_gets_no_5xx_and_logs_no_error(
    make_stack: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rnd = random.Random(SEED)
    statuses: dict[bytes, int] = {}
    async with make_stack(read_timeout_s=0.3) as stack:
        for _ in range(CONNECTIONS):
            n = rnd.choice([1, 1, 1, 2, 3])  # pipelined, some of them
            sent = [request(rnd, last=i == n - 1) for i in range(n)]
            reader, writer = await asyncio.open_connection("127.0.0.1", stack.service.http.port)
            try:
                writer.write(b"".join(sent))
                await writer.drain()
                async with asyncio.timeout(10):  # the read timeout (0.3 s) ends every connection
                    answer = await reader.read()
            except ConnectionError:  # refused mid-request: the answer, if any, is what arrived before
                answer = b""
            finally:
                writer.close()
            for line in answer.split(b"\r\n"):
                if line.startswith(b"HTTP/1.1 ") and len(line) >= 12:
                    statuses[line[9:12]] = statuses.get(line[9:12], 0) + 1
                    assert not line[9:12].startswith(b"5"), (sent, answer[:2000])
            errors = logged_errors(caplog)
            assert not errors, (sent, errors[:3])
        assert (await stack.http.get("/healthz")).status_code == 200
    # the mix reached the routes: answers of both kinds (a connection cut by its read timeout has none)
    assert sum(statuses.values()) >= CONNECTIONS // 2 and statuses.get(b"400", 0) >= 1
    assert statuses.get(b"200", 0) + statuses.get(b"202", 0) >= 1, statuses
