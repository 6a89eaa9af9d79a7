"""HTTP/1.1 message framing of the sidecar's own HTTP server against RFC 9112 / 9110, end to end over a real
socket (from the session 31 review: each test here failed on the code as reviewed). The sidecar never
switches protocols: a request asking to (Upgrade) with a body is refused 400, one without is answered with
``connection: close``, and nothing after its head is read (app.api.http_protocol)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import pytest

from tests.app.api.test_hot_path import connect
from tests.app.conftest import Stack


def _send(topic: str, *extra: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    body = b'{"topic": "%s", "body": "x"}' % topic.encode()
    head = [b"POST /v1/messages " + version, b"host: 127.0.0.1"]
    head += [b"content-type: application/json", b"content-length: %d" % len(body), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded: a hang fails the test)."""
    return await asyncio.wait_for(reader.read(), 10)


def _statuses(raw: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


async def _exchange(stack: Stack, raw: bytes) -> bytes:
    """Everything the server answers to ``raw``, sent on a connection of its own, until it closes it."""
    reader, writer = await connect(stack)
    try:
        writer.write(raw)
        await writer.drain()
        return await _until_closed(reader)
    finally:
        writer.close()


HEALTH_CLOSE = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"


@pytest.mark.parametrize("access_log", [False, True], ids=["hot protocol", "uvicorn's"])
@pytest.mark.parametrize("upgrade", [b"h2c", b"websocket"])
async def test_a_content_length_body_of_a_request_with_an_ignored_upgrade_is_not_read_as_a_new_request(
    make_stack: Any, upgrade: bytes, access_log: bool
) -> None:
    """RFC 9110 7.8: a server that ignores Upgrade goes on with HTTP/1.1, so the request's Content-Length
    body is its body. llhttp ends the message at its head (on_message_complete, then HttpParserUpgrade),
    uvicorn only warns "Unsupported upgrade request." and the parser starts afresh on the next read: the
    body the client sent is parsed as a request of its own. Here that body is a send, delivered (a message
    on the broker nobody asked for) and answered: three answers on a connection that sent two requests.
    The sidecar never upgrades, and cannot read such a body as a body (llhttp has ended the message): the
    request is refused 400 with ``connection: close`` (the client is told that the request after it was
    not read), and nothing after its head is read."""
    smuggled = _send("Smuggled")
    head = (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"connection: upgrade\r\nupgrade: " + upgrade + b"\r\ncontent-length: %d\r\n\r\n" % len(smuggled)
    )
    async with make_stack(access_log=access_log) as stack:
        reader, writer = await connect(stack)
        try:
            writer.write(head)
            await writer.drain()
            # Only so that the server reads the head on its own, as a client that waits before its body
            # (Expect-less) gets: a bound, the outcome asserted does not depend on it.
            try:
                early = await asyncio.wait_for(reader.read(65536), 2)
            except TimeoutError:
                early = b""
            writer.write(smuggled + HEALTH_CLOSE)  # the first request's body, then one more request
            await writer.drain()
            answers = early + await _until_closed(reader)
        finally:
            writer.close()
        assert stack.stored("Smuggled") == [], "the request's body was delivered as a send of its own"
        # Two requests on the connection: the first refused, saying the connection closes (so the client
        # knows the second was not read), and the second never parsed.
        assert _statuses(answers) == [400], f"{answers[:800]!r}"
        assert b"connection: close\r\n" in answers and b"application/problem+json" in answers


async def test_a_chunked_body_of_a_request_asking_to_upgrade_is_refused_and_never_read(stack: Stack) -> None:
    """As with a Content-Length: a chunked body after an upgrade's head is not read, as a request or at
    all."""
    smuggled = _send("SmuggledChunked")
    raw = (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"connection: upgrade\r\nupgrade: h2c\r\ntransfer-encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(smuggled), smuggled)
    )
    answers = await _exchange(stack, raw)
    assert _statuses(answers) == [400], f"{answers[:400]!r}"
    assert b'"field":"Upgrade"' in answers and b"connection: close\r\n" in answers
    assert stack.stored("SmuggledChunked") == []


async def test_an_upgrade_behind_a_hot_request_is_handed_over_with_its_body_and_refused(stack: Stack) -> None:
    """The hot protocol hands an upgrade over to uvicorn's side once the answers owed before it are out,
    fed from the upgrade's first byte: its body goes with it, and is not read there either."""
    smuggled = _send("SmuggledBehind")
    upgrade = (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"connection: upgrade\r\nupgrade: h2c\r\ncontent-length: %d\r\n\r\n" % len(smuggled)
    )
    reader, writer = await connect(stack)
    try:
        writer.write(_send("Before") + upgrade)  # pipelined: the upgrade's head waits for the send's answer
        await writer.drain()
        early = b""
        # Only so that the server has handed the head over before its body comes (a bound, the outcome
        # asserted does not depend on it): the answers come by then.
        with contextlib.suppress(TimeoutError):
            while len(_statuses(early)) < 2:
                chunk = await asyncio.wait_for(reader.read(65536), 2)
                if not chunk:
                    break
                early += chunk
        writer.write(smuggled + HEALTH_CLOSE)
        await writer.drain()
        answers = early + await _until_closed(reader)
    finally:
        writer.close()
    assert _statuses(answers) == [200, 400], f"{answers[:800]!r}"
    assert b'"field":"Upgrade"' in answers
    assert len(stack.stored("Before")) == 1
    assert stack.stored("SmuggledBehind") == []


async def test_an_http_1_0_request_s_expect_100_continue_is_ignored_and_no_1xx_is_sent(stack: Stack) -> None:
    """RFC 9110 10.1.1: "A server that receives a 100-continue expectation in an HTTP/1.0 request MUST
    ignore that expectation"; 15.2: "A server MUST NOT send a 1xx response to an HTTP/1.0 client". uvicorn
    writes "HTTP/1.1 100 Continue" whatever the request's version; an HTTP/1.0 client reads it as the
    final answer (no body, then what follows as garbage)."""
    request = _send("TenContinue", b"expect: 100-continue", version=b"HTTP/1.0")
    head, _, body = request.partition(b"\r\n\r\n")
    reader, writer = await connect(stack)
    try:
        writer.write(head + b"\r\n\r\n")
        await writer.drain()
        # Only so that the server reads the head on its own (as a client waiting for 100 would make it):
        # a bound, the outcome asserted does not depend on it.
        try:
            early = await asyncio.wait_for(reader.read(65536), 2)
        except TimeoutError:
            early = b""
        writer.write(body)
        await writer.drain()
        answers = early + await _until_closed(reader)  # HTTP/1.0: closed after its answer
    finally:
        writer.close()
    assert _statuses(answers) == [200], f"answers to one HTTP/1.0 request: {answers[:400]!r}"


@pytest.mark.parametrize(
    "hosts",
    [[], [b"127.0.0.1", b"127.0.0.1"], [b"127.0.0.1", b"evil.example"]],
    ids=["none", "two equal", "two"],
)
async def test_an_http_1_1_request_without_one_host_field_is_400(stack: Stack, hosts: list[bytes]) -> None:
    """RFC 9112 3.2: "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1 request
    message that lacks a Host header field and to any request message that contains more than one Host
    header field line". The Host guard (DNS rebinding) reads only the first Host, and lets a request
    without one through: here each is a send, delivered and answered 200."""
    body = b'{"topic": "HostT", "body": "x"}'
    head = [b"POST /v1/messages HTTP/1.1", *(b"host: " + h for h in hosts)]
    head += [b"content-type: application/json", b"content-length: %d" % len(body), b"connection: close"]
    answers = await _exchange(stack, b"\r\n".join(head) + b"\r\n\r\n" + body)
    assert _statuses(answers) == [400], f"{answers[:400]!r}"
    assert b"application/problem+json" in answers and b'"field":"Host"' in answers
    assert stack.stored("HostT") == []


async def test_an_http_1_0_request_without_host_is_still_served(stack: Stack) -> None:
    """RFC 9112 3.2's 400 is for HTTP/1.1 requests without Host: HTTP/1.0 has no Host to require."""
    request = _send("TenNoHost", version=b"HTTP/1.0").replace(b"host: 127.0.0.1\r\n", b"")
    answers = await _exchange(stack, request)
    assert _statuses(answers) == [200], f"{answers[:400]!r}"
    assert len(stack.stored("TenNoHost")) == 1


@pytest.mark.parametrize("access_log", [False, True], ids=["hot protocol", "uvicorn's"])
async def test_an_absolute_form_target_s_host_is_the_one_the_host_guard_checks(
    make_stack: Any, access_log: bool
) -> None:
    """RFC 9112 3.2.2: "When an origin server receives a request with an absolute-form of request-target,
    the origin server MUST ignore the received Host header field (if any) and instead use the host
    information of the request-target." The Host guard checks the Host field: a request for
    http://evil.example/v1/messages, whose host a Host field of that name is refused for (403), is
    delivered and answered 200."""
    body = b'{"topic": "AbsT", "body": "x"}'
    raw = (
        b"POST http://evil.example/v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
        % (len(body), body)
    )
    async with make_stack(access_log=access_log) as stack:
        refused = await stack.http.post(
            "/v1/messages", content=body, headers={"content-type": "application/json", "host": "evil.example"}
        )
        assert refused.status_code == 403  # the guard's verdict on that host
        answers = await _exchange(stack, raw)
        assert _statuses(answers) == [403], f"{answers[:400]!r}"
        assert stack.stored("AbsT") == []
        # The target's host is the one checked: a loopback one is served, whatever Host says.
        reader, writer = await connect(stack)
        try:
            writer.write(
                raw.replace(b"evil.example", b"127.0.0.1:9").replace(b"host: 127.0.0.1", b"host: x.example")
            )
            await writer.drain()
            answers = await _until_closed(reader)
        finally:
            writer.close()
        assert _statuses(answers) == [200], f"{answers[:400]!r}"
        assert len(stack.stored("AbsT")) == 1


async def test_an_http_1_0_absolute_form_target_without_host_has_its_host_checked(stack: Stack) -> None:
    """HTTP/1.0 needs no Host, and a request without one passes the Host guard (no browser sends it): an
    absolute-form target names its host all the same, and that one is checked."""
    body = b'{"topic": "AbsTen", "body": "x"}'
    raw = (
        b"POST http://evil.example/v1/messages HTTP/1.0\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    answers = await _exchange(stack, raw)
    assert _statuses(answers) == [403], f"{answers[:400]!r}"
    assert stack.stored("AbsTen") == []


async def test_a_trailer_field_is_not_merged_into_the_request_s_header_fields(make_stack: Any) -> None:
    """RFC 9110 6.5.1: "A recipient MUST NOT merge a trailer field into the header section unless [it]
    understands the corresponding header field definition and that definition explicitly permits and
    defines how trailer field values can be safely merged". uvicorn's on_header appends every field the
    parser reports, a chunked body's trailer fields included, to the list that is the scope's headers:
    parsed in the same read as the head, a trailer is a header by the time the edge's guards read them.
    Here the bearer token, missing from the header section, comes in the trailer: the send is authorized,
    delivered and answered 200 (the Authorization header field permits no such merge)."""
    body = b'{"topic": "TrailerT", "body": "x"}'
    raw = (
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        b"%x\r\n%s\r\n0\r\nauthorization: Bearer s3cret\r\n\r\n" % (len(body), body)
    )
    async with make_stack(auth_token="s3cret") as stack:
        reader, writer = await connect(stack)
        try:
            writer.write(raw)  # one write: the server reads the head and the trailer together
            await writer.drain()
            answers = await _until_closed(reader)
        finally:
            writer.close()
        assert _statuses(answers) == [401], f"{answers[:400]!r}"
        assert stack.stored("TrailerT") == []


@pytest.mark.parametrize("access_log", [False, True], ids=["hot protocol", "uvicorn's"])
async def test_a_request_pipelined_behind_one_with_an_ignored_upgrade_is_told_it_was_not_read(
    make_stack: Any, access_log: bool
) -> None:
    """The same cause seen from the other side: what follows the head of a request with an Upgrade the
    server ignores, in the same read, is dropped unparsed (uvicorn stops at HttpParserUpgrade). RFC 9110
    7.8 lets the server ignore Upgrade and go on in HTTP/1.1, and RFC 9112 9.3.2 has every pipelined
    request answered in order: here the second request was never answered, and the connection waited
    until its keep-alive time closed it (a send pipelined there was lost without a word). Now the upgrade
    request is answered with ``connection: close`` and the connection closes: RFC 9112 9.6, the client
    knows the requests it pipelined after it were not processed (and sends them again elsewhere)."""
    first = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n"
    async with make_stack(access_log=access_log) as stack:
        reader, writer = await connect(stack)
        try:
            writer.write(first + _send("AfterUpgrade", b"connection: close"))  # one write, pipelined
            await writer.drain()
            answers = await _until_closed(reader)
        finally:
            writer.close()
        assert _statuses(answers) == [200], f"{answers[:600]!r}"
        assert (
            answers.startswith(b"HTTP/1.1 200 ") and b"connection: close\r\n" in answers
        )  # the client is told
        assert stack.stored("AfterUpgrade") == []  # not read: never a send the client was not answered for
