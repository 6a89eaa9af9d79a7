"""Before a job starts Spark: does a sidecar answer at its endpoint? One GET /healthz, bounded by a few
seconds, so a wrong or stopped endpoint is one line at once instead of every task's minutes of retries."""

from __future__ import annotations

import time

import httpx
import orjson

from .deadline import read_within

HEALTH_PATH = "/healthz"  # answers without the token: the check needs none
CHECK_TIMEOUT_S = 2.0  # the whole answer's deadline (and each phase's), so at most a few seconds in all
MAX_ANSWER_BYTES = 4096  # the sidecar answers {"status":"ok"}: something longer is not it
_HEALTHY = {"status": "ok"}


def unreachable(
    endpoint: str, *, timeout_s: float = CHECK_TIMEOUT_S, transport: httpx.BaseTransport | None = None
) -> str | None:
    """Why no sidecar answers at ``endpoint`` (one line naming it), or None when one does. The answer
    must be complete within ``timeout_s`` of the start, checked as each piece of it arrives (httpx's
    timeout bounds each socket read only, which an endpoint sending a byte at a time never hits), and
    at most MAX_ANSWER_BYTES long."""
    url = endpoint.rstrip("/") + HEALTH_PATH
    late = f"no sidecar answers at {endpoint}: GET {url} got no answer within {timeout_s:g} s"
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as http, http.stream("GET", url) as resp:
            status = resp.status_code
            # past MAX_ANSWER_BYTES not the sidecar's answer: told below, whatever the rest is
            body = read_within(resp.iter_bytes(), deadline, MAX_ANSWER_BYTES)
            if body is None:
                return late
    except httpx.TimeoutException:
        return late
    except httpx.HTTPError as exc:
        why = " ".join(str(exc).split()) or "no detail"  # one line, whatever the library said
        return f"no sidecar answers at {endpoint}: {type(exc).__name__}: {why}"
    try:
        healthy = status == 200 and len(body) <= MAX_ANSWER_BYTES and orjson.loads(body) == _HEALTHY
    except ValueError:
        healthy = False
    if not healthy:
        return f"{endpoint} is not the sidecar's HTTP API: GET {url} answered {status}"
    return None
