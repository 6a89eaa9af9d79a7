"""Before a job starts Spark: does a sidecar answer at its endpoint? One GET /healthz, bounded by a few
seconds, so a wrong or stopped endpoint is one line at once instead of every task's minutes of retries."""

from __future__ import annotations

import httpx

HEALTH_PATH = "/healthz"  # answers without the token: the check needs none
CHECK_TIMEOUT_S = 2.0  # per phase (connect, then the answer), so at most a few seconds in all
_HEALTHY = {"status": "ok"}


def unreachable(
    endpoint: str, *, timeout_s: float = CHECK_TIMEOUT_S, transport: httpx.BaseTransport | None = None
) -> str | None:
    """Why no sidecar answers at ``endpoint`` (one line naming it), or None when one does."""
    url = endpoint.rstrip("/") + HEALTH_PATH
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as http:
            resp = http.get(url)
    except httpx.TimeoutException:
        return f"no sidecar answers at {endpoint}: GET {url} got no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        why = " ".join(str(exc).split()) or "no detail"  # one line, whatever the library said
        return f"no sidecar answers at {endpoint}: {type(exc).__name__}: {why}"
    try:
        healthy = resp.status_code == 200 and resp.json() == _HEALTHY
    except ValueError:
        healthy = False
    if not healthy:
        return f"{endpoint} is not the sidecar's HTTP API: GET {url} answered {resp.status_code}"
    return None
