"""The dmq process's /readyz answers in serve's shape: ``ready`` (a boolean), and ``reason`` only when
not ready, with 200 or 503."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry

from rocksidecar.app.api.schemas import ReadyOut
from rocksidecar.app.dmq.http import create_app


@pytest.mark.parametrize(
    ("state", "status", "body"),
    [
        ((True, "ok"), 200, {"ready": True}),
        ((False, "consumer not started"), 503, {"ready": False, "reason": "consumer not started"}),
    ],
)
async def test_readyz_has_the_shape_of_serves(
    state: tuple[bool, str], status: int, body: dict[str, object]
) -> None:
    app = create_app(CollectorRegistry(), lambda: state)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dmq") as client:
        resp = await client.get("/readyz")
    assert (resp.status_code, resp.json()) == (status, body)
    serves = set(ReadyOut.model_fields) | {f.alias for f in ReadyOut.model_fields.values() if f.alias}
    assert set(body) <= serves and ReadyOut.model_fields["ready"].annotation is bool
