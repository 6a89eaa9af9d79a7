"""The dmq process's /readyz answers in serve's shape (issue 27 item 17): the same fields, built by the
same app.readiness, with 200 or 503, and the service's own reasons (scheduler, inner consumer) added."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from rocksidecar.app.api.schemas import ReadyOut
from rocksidecar.app.dmq.http import create_app

SERVES = set(ReadyOut.model_fields) | {f.alias for f in ReadyOut.model_fields.values() if f.alias}
DETAILS = {"store": "ok", "nameServer": "reachable", "writableBrokers": ["broker-a"], "brokers": []}


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ((True, DETAILS), 200),
        ((False, {**DETAILS, "reason": "the inner topic's consumer has not started"}), 503),
    ],
)
async def test_readyz_has_the_shape_of_serves(state: tuple[bool, dict[str, Any]], status: int) -> None:
    async def ready() -> tuple[bool, dict[str, Any]]:
        return state

    app = create_app(CollectorRegistry(), ready)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dmq") as client:
        resp = await client.get("/readyz")
    body = resp.json()
    assert (resp.status_code, body) == (status, {"ready": state[0], **state[1]})
    assert set(body) <= SERVES and ReadyOut.model_fields["ready"].annotation is bool
    assert {"ready", "store", "nameServer", "brokers"} <= set(body)
