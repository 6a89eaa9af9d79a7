"""Review of the Spark sink's internals (client, publisher, row -> message): each test fails on the code
it was written against, for the reason in its docstring."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import httpx
import orjson
import pytest

from rocksidecar.pipeline.client import SidecarClient, SidecarError
from rocksidecar.pipeline.message import MessageBuilder
from rocksidecar.pipeline.options import WriteOptions
from rocksidecar.pipeline.publisher import PartitionPublisher
from tests.pipeline.fake_sidecar import FakeSidecar
from tests.pipeline.http_double import Reply, Request, serve

pytestmark = pytest.mark.timeout(60)
MESSAGE = b'{"topic":"T","body":"x"}'


def _answer(status: int, doc: dict[str, Any], *extra: str) -> bytes:
    body = orjson.dumps(doc)
    head = "".join(f"{h}\r\n" for h in extra)
    return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status,
        len(body),
        head.encode(),
        body,
    )


def _read_request(conn: socket.socket, buf: bytes) -> tuple[bytes, bytes] | None:
    """(one request's body, what followed it), or None when the client closed."""
    while b"\r\n\r\n" not in buf:
        piece = conn.recv(65536)
        if not piece:
            return None
        buf += piece
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        piece = conn.recv(65536)
        if not piece:
            return None
        rest += piece
    return rest[:length], rest[length:]


@contextmanager
def scripted_server(answers: list[bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """A raw HTTP/1.1 server: request n (over all connections, in order) gets ``answers[n]`` (the last
    one for any later request); the connection stays open for the next request. Yields (url, bodies of
    the requests it read)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    seen: list[bytes] = []
    lock = threading.Lock()

    def one(conn: socket.socket) -> None:
        buf = b""
        try:
            while True:
                got = _read_request(conn, buf)
                if got is None:
                    return
                body, buf = got
                with lock:
                    seen.append(body)
                    answer = answers[min(len(seen), len(answers)) - 1]
                conn.sendall(answer)
        except OSError:
            pass
        finally:
            conn.close()

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", seen
    finally:
        srv.close()


def test_bytes_past_an_answer_on_a_kept_alive_connection_are_not_taken_for_the_next_batchs_answer() -> None:
    """A peer (a proxy, a broken server) sends more than its Content-Length: the first answer is followed,
    in the same write, by a complete 200 that no request asked for. The client keeps the connection alive
    and takes those bytes for the answer to its NEXT batch, which the server then answers 503 (nothing
    stored): the client reports that batch's message SENT, with an id that is not its own. A message
    answered 503 is counted published and never retried: lost while the job exits 0."""
    first = _answer(200, {"results": [{"index": 0, "status": "SENT", "id": "ID-OF-BATCH-0"}]})
    stale = _answer(200, {"results": [{"index": 0, "status": "SENT", "id": "NOBODY-ASKED"}]})
    unavailable = _answer(503, {"title": "Unavailable", "detail": "store full"}, "Retry-After: 1")
    with (
        scripted_server([first + stale, unavailable]) as (url, seen),
        SidecarClient(url, max_retries=0, timeout_s=5) as client,
    ):
        assert [r.id for r in client.post_encoded([MESSAGE], "k0")] == ["ID-OF-BATCH-0"]
        try:
            second = client.post_encoded([b'{"topic":"T","body":"y"}'], "k1")
        except SidecarError:
            second = None  # the server's own answer (503) after no retries: what should happen
    assert second is None, (
        f"batch 1 was answered {[(r.status, r.id) for r in second]} from bytes sent before it was "
        f"posted; the server answered it 503 ({len(seen)} requests read)"
    )


def test_an_item_status_of_another_json_type_is_taken_as_failed_not_a_crash(sleeps: list[float]) -> None:
    """_results promises that a status this client does not know makes the item FAILED (posted again).
    A status that is a JSON array or object is unhashable: ``status in STATUSES`` raises TypeError out of
    post_encoded (not SidecarError, not FAILED), so the task dies on a TypeError instead."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"results": [{"index": 0, "status": ["SENT"], "id": "a"}]})

    with SidecarClient("http://s", transport=httpx.MockTransport(answer), sleep=sleeps.append) as client:
        results = client.post_encoded([MESSAGE], "k")
    assert [r.status for r in results] == ["FAILED"]


def test_a_503_whose_body_cannot_be_decoded_is_waited_out_like_any_503(
    fake: FakeSidecar, sleeps: list[float]
) -> None:
    """A 503 (from a proxy, say) labelled Content-Encoding: gzip whose body is not gzip: the client's
    rebuilt httpx.Response decodes it at once and raises httpx.DecodingError, which is neither a
    TransportError (retried) nor a SidecarError: the 503 is not waited out, the task fails on an
    exception the client's contract (SidecarError, GaveUpError) does not name."""
    calls: list[int] = []

    def handler(req: Request) -> Reply | None:
        calls.append(1)
        if len(calls) == 1:
            return Reply(503, b"not gzip at all", {"Content-Encoding": "gzip", "Retry-After": "1"})
        return fake(req)

    with (
        serve(handler) as url,
        SidecarClient(url, max_retries=3, sleep=sleeps.append, timeout_s=5) as client,
    ):
        results = client.post_encoded([MESSAGE], "k")
    assert [r.status for r in results] == ["SENT"] and sleeps == [1.0]


class _Flooded(Exception):
    pass


CAP = 32 * 1024 * 1024  # the answer to one message is a few hundred bytes


class _EndlessAnswer(httpx.SyncByteStream):
    """A 200 whose body starts as a valid answer and goes on (JSON whitespace) without end, fast."""

    def __init__(self) -> None:
        self.served = 0

    def __iter__(self) -> Iterator[bytes]:
        yield orjson.dumps({"results": [{"index": 0, "status": "SENT", "id": "a"}]})
        chunk = b" " * (1 << 20)
        while True:
            if self.served >= CAP:
                raise _Flooded(f"the client read {self.served} bytes of a one-message answer")
            self.served += len(chunk)
            yield chunk


class _EndlessTransport(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "application/json"}, stream=_EndlessAnswer())


def test_an_endless_answer_is_not_read_into_memory_without_bound(sleeps: list[float]) -> None:
    """_exchange reads the whole answer (read_within without ``most``) into memory before looking at it;
    only the time limit stops it. A peer sending fast (loopback, a proxy) fills an executor's memory at
    network speed for ``timeout`` seconds (30 by default): gigabytes. reachable.py bounds its answer
    (MAX_ANSWER_BYTES); the batch answer, whose size follows from the number of messages, is not bounded."""
    with SidecarClient("http://s", transport=_EndlessTransport(), max_retries=0, sleep=sleeps.append) as c:
        try:
            c.post_encoded([MESSAGE], "k")
        except SidecarError:
            pass  # refused as too long (or given up on): bounded
        except _Flooded as exc:
            pytest.fail(f"no bound on the answer's size: {exc}")


def test_a_whole_row_body_with_a_decimal_keyed_map_is_published(
    client: SidecarClient, fake: FakeSidecar
) -> None:
    """Without bodyColumn the body is the row as JSON; the driver accepts a map<decimal(10,2),string>
    column (only intervals, variant, geography, geometry are refused). orjson's OPT_NON_STR_KEYS cannot
    write a Decimal key, so row_json raises TypeError: not an UnsendableRowError (refused and named),
    so it escapes batches() and fails every attempt of the task, and the write, with
    "Dict key must a type serializable with OPT_NON_STR_KEYS". Spark's to_json writes the key as its
    text, as _json_default already does for Decimal values."""
    builder = MessageBuilder(WriteOptions(topic="T", columns={}))
    report = PartitionPublisher(client, builder, "job:p0", 0).publish(
        [{"k": "a", "m": {Decimal("1.50"): "x"}}]
    )
    assert report.sent == 1
    assert fake.bodies() == ['{"k":"a","m":{"1.50":"x"}}']


# Added with the fixes: the parts of the findings the five tests above do not reach.


class _OneAnswer(httpx.BaseTransport):
    def __init__(self, status: int, body: bytes, **headers: str) -> None:
        self.status, self.body, self.headers = status, body, headers

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(self.status, headers=self.headers, stream=httpx.ByteStream(self.body))


def test_a_gzip_bomb_answer_is_refused_without_being_decoded_whole(sleeps: list[float]) -> None:
    """A 200 of 32 KiB, labelled gzip, that decodes to 32 MiB: bounding the bytes read is not enough,
    the rebuilt httpx.Response decoded them in one go (32 MiB in memory for one message's answer)."""
    import gzip
    import tracemalloc

    bomb = gzip.compress(b" " * (32 << 20))
    with SidecarClient(
        "http://s", transport=_OneAnswer(200, bomb, **{"Content-Encoding": "gzip"}), sleep=sleeps.append
    ) as c:
        tracemalloc.start()
        try:
            with pytest.raises(SidecarError, match="decoded"):
                c.post_encoded([MESSAGE], "k")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes held to refuse a {len(bomb)}-byte answer"


def test_a_200_whose_body_cannot_be_decoded_is_a_sidecar_error(sleeps: list[float]) -> None:
    """A 200 labelled gzip whose body is not: its results cannot be read, which is SidecarError (the
    client's contract), not httpx.DecodingError."""
    transport = _OneAnswer(200, b"not gzip at all", **{"Content-Encoding": "gzip"})
    with (
        SidecarClient("http://s", transport=transport, sleep=sleeps.append) as c,
        pytest.raises(SidecarError) as caught,
    ):
        c.post_encoded([MESSAGE], "k")
    assert caught.value.status == 200


def test_map_keys_without_a_json_text_refuse_the_row_naming_the_column() -> None:
    """Spark's to_json writes a map key as its value's toString: a decimal as Java's BigDecimal does
    (checked on Spark 4.3: "1E-8", "0E-8", "-0.50"), a binary key as the JVM array's identity
    ("[B@17a2c", another each run), which no one can match. Such a row is refused, naming its column,
    rather than raising orjson's TypeError out of batches()."""
    from rocksidecar.pipeline.message import UnsendableRowError, row_json

    assert row_json({"m": {Decimal("1E-8"): 1, Decimal("0E-8"): 2, Decimal("-0.50"): 3}}) == (
        '{"m":{"1E-8":1,"0E-8":2,"-0.50":3}}'
    )
    builder = MessageBuilder(WriteOptions(topic="T", columns={}))
    with pytest.raises(UnsendableRowError, match="column 'm'"):
        builder.build({"k": "a", "m": {b"ab": "x"}})
