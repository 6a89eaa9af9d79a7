"""`timeout` bounds a whole request, not each socket read: a sidecar (or a proxy) that answers a byte at
a time, never silent long enough for a read timeout, can hold neither a task's request nor spark-publish's
reachability check for longer than the deadline; an answer read in pieces is still decoded as before."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import orjson
import pytest

from rocksidecar.pipeline.client import GaveUpError, SidecarClient
from rocksidecar.pipeline.reachable import MAX_ANSWER_BYTES, unreachable
from tests.pipeline.http_double import Reply, Request, serve

pytestmark = pytest.mark.timeout(60)
MESSAGE = b'{"topic":"T","body":"x"}'
TRICKLE_S = 0.1  # the server's pace: one byte this often, far below any read timeout used here
BOUND_S = 10.0  # generous: the deadlines are 0.5 s, the server would trickle until the test ends


@contextmanager
def trickling_server() -> Iterator[str]:
    """Answers every request with headers promising 100 000 bytes of body, then sends one byte every
    TRICKLE_S until the context ends: never silent for as long as a read timeout, never done."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
            )
            while not stop.wait(TRICKLE_S):  # the server's own pacing, not the test's synchronisation
                conn.sendall(b" ")
        except OSError:
            pass  # the client gave up and closed
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
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        srv.close()


def test_a_request_to_a_trickling_sidecar_ends_at_its_deadline_and_is_retried() -> None:
    sleeps: list[float] = []
    with (
        trickling_server() as url,
        SidecarClient(url, timeout_s=0.5, max_retries=1, sleep=sleeps.append) as c,
    ):
        started = time.monotonic()
        with pytest.raises(GaveUpError, match=r"ReadTimeout: no complete answer within 0\.5 s"):
            c.post_encoded([MESSAGE], "k")
        elapsed = time.monotonic() - started
    assert len(sleeps) == 1  # a request past its deadline is a timeout: waited out like any other
    assert elapsed < BOUND_S, f"two requests with timeout=0.5 s took {elapsed:.1f} s"


def test_the_reachability_check_ends_at_its_deadline_against_a_trickling_endpoint() -> None:
    with trickling_server() as url:
        started = time.monotonic()
        why = unreachable(url, timeout_s=0.5)
        elapsed = time.monotonic() - started
    assert why == f"no sidecar answers at {url}: GET {url}/healthz got no answer within 0.5 s"
    assert elapsed < BOUND_S, f"the check with timeout 0.5 s took {elapsed:.1f} s"


def test_a_long_healthz_answer_is_not_taken_for_the_sidecar() -> None:
    """The check reads at most MAX_ANSWER_BYTES: the sidecar's answer is {"status":"ok"}."""
    padded = b'{"status":"ok","pad":"' + b"x" * MAX_ANSWER_BYTES + b'"}'
    with serve(lambda req: Reply(200, padded)) as url:
        why = unreachable(url)
    assert why == f"{url} is not the sidecar's HTTP API: GET {url}/healthz answered 200"


def test_an_answer_read_in_pieces_is_decoded_as_its_content_encoding_says() -> None:
    """The client streams the answer to check its deadline, then rebuilds it: a gzip answer (a proxy
    may compress) must still read as the sidecar's JSON."""
    answer = orjson.dumps({"results": [{"index": 0, "status": "SENT", "id": "ID1"}]})

    def gzipped(req: Request) -> Reply:
        return Reply(200, gzip.compress(answer), {"Content-Encoding": "gzip"})

    with serve(gzipped) as url, SidecarClient(url, max_retries=0) as c:
        results = c.post_encoded([MESSAGE], "k")
    assert [(r.status, r.id) for r in results] == [("SENT", "ID1")]


def test_a_mock_transport_answer_is_used_as_it_is() -> None:
    """httpx.MockTransport hands over an answer read already: nothing is left to stream."""
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, json={"results": [{"index": 0, "status": "SPOOLED"}]})
    )
    with SidecarClient("http://sidecar", transport=transport) as c:
        assert [r.status for r in c.post_encoded([MESSAGE])] == ["SPOOLED"]
