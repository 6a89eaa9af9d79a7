"""spark-publish checks once, before Spark starts, that a sidecar answers at --endpoint: a closed port,
a silent one and something that is not the sidecar each give one line at once."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from rocksidecar.pipeline.reachable import unreachable


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: held, so nobody else takes it, and refusing connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def test_a_closed_port_is_refused_in_one_line(closed_port: int) -> None:
    why = unreachable(f"http://127.0.0.1:{closed_port}")
    assert why is not None and why.startswith(
        f"no sidecar answers at http://127.0.0.1:{closed_port}: ConnectError"
    )
    assert "\n" not in why


def test_a_port_that_never_answers_is_given_up_within_the_bound() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # the kernel accepts the connection; nobody ever reads or answers
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        assert (
            unreachable(url, timeout_s=0.2)
            == f"no sidecar answers at {url}: GET {url}/healthz got no answer within 0.2 s"
        )


def _answering(status: int, body: bytes) -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda req: (
            httpx.Response(status, content=body) if req.url.path == "/healthz" else httpx.Response(404)
        )
    )


@pytest.mark.parametrize(
    ("status", "body"), [(404, b'{"detail":"Not Found"}'), (200, b"<html>"), (200, b'{"status":"down"}')]
)
def test_something_else_on_the_port_is_not_taken_for_the_sidecar(status: int, body: bytes) -> None:
    why = unreachable("http://h:1/", transport=_answering(status, body))
    assert why == f"http://h:1/ is not the sidecar's HTTP API: GET http://h:1/healthz answered {status}"


def test_the_sidecar_answering_healthz_passes() -> None:
    assert unreachable("http://h:1", transport=_answering(200, b'{"status":"ok"}')) is None
