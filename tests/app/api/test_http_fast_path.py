"""The edge's fast path for the two hot routes (issue 18): answered past FastAPI's router, with the same
answers, guards, limits and counting as the routes themselves."""

from __future__ import annotations

from typing import Any

import orjson

from rocksidecar.app.api.middleware import EdgeMiddleware
from tests.app.conftest import Stack

JSON = {"content-type": "application/json"}
HOT = ("/v1/messages", "/v1/messages:batch")
# Values that differ between two sends of the same message: where it went, when, under which id.
_VARYING = {
    "id",
    "msgId",
    "broker",
    "queueId",
    "queueOffset",
    "nextAttemptAtMs",
    "nextAttemptAt",
    "deliverAtMs",
}


def edge_of(stack: Stack) -> EdgeMiddleware:
    node: Any = stack.service.http._app.edge
    while not isinstance(node, EdgeMiddleware):
        node = node.app
    return node


def _normal(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: "*" if k in _VARYING else _normal(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_normal(v) for v in doc]
    return doc


def corpus(run: str) -> list[tuple[str, str, bytes, dict[str, str]]]:
    """(path, query, body, headers): each answer class of the hot routes. Idempotency keys are per run."""
    one = b'{"topic": "T", "body": "x"}'
    batch = b'{"messages": [{"topic": "T", "body": "a"}, {"topic": "", "body": "b"}]}'
    return [
        ("/v1/messages", "", one, JSON),
        ("/v1/messages", "?ack=spool", one, JSON),
        ("/v1/messages", "?ack=never", one, JSON),
        ("/v1/messages", "?ack=never&ack=spool", one, JSON),  # the last one counts, as in Starlette
        ("/v1/messages", "", b'{"topic": "T", "body": ', JSON),
        ("/v1/messages", "", b'{"body": "x"}', JSON),
        ("/v1/messages", "", b'{"topic": "T", "body": "x", "delayMs": 1' + b"0" * 5000 + b"}", JSON),
        ("/v1/messages", "", b"[]", JSON),
        ("/v1/messages", "", one, {**JSON, "idempotency-key": f"k-{run}"}),
        ("/v1/messages", "", one, {**JSON, "idempotency-key": f"k-{run}"}),  # replayed
        ("/v1/messages", "", b'{"topic": "U", "body": "x"}', {**JSON, "idempotency-key": f"k-{run}"}),
        ("/v1/messages", "", one, {**JSON, "idempotency-key": ""}),
        ("/v1/messages", "", one, {"content-type": "text/plain"}),
        ("/v1/messages:batch", "", batch, JSON),
        ("/v1/messages:batch", "?ack=spool", batch, JSON),
        ("/v1/messages:batch", "?ack=", batch, JSON),
        ("/v1/messages:batch", "", b'{"messages": []}', JSON),
        ("/v1/messages:batch", "", b'{"messages": [' + b",".join([one] * 11) + b"]}", JSON),
        ("/v1/messages:batch", "", b'{"nope": 1}', JSON),
        ("/v1/messages:batch", "", batch, {**JSON, "idempotency-key": f"b-{run}"}),
        ("/v1/messages:batch", "", batch, {**JSON, "idempotency-key": f"b-{run}"}),
    ]


async def answers(stack: Stack, run: str) -> list[tuple[int, dict[str, str], Any]]:
    out = []
    for path, query, body, headers in corpus(run):
        r = await stack.http.post(path + query, content=body, headers=headers)
        assert int(r.headers["content-length"]) == len(r.content)
        kept = {k: v for k, v in r.headers.items() if k not in ("date", "server", "content-length")}
        out.append((r.status_code, kept, _normal(orjson.loads(r.content))))
    return out


async def test_the_fast_path_answers_as_the_routes_do(make_stack: Any) -> None:
    async with make_stack(batch_limit=10) as stack:
        await stack.http.get("/healthz")
        edge = edge_of(stack)
        assert set(edge.fast) == set(HOT)
        fast = await answers(stack, "fast")
        edge.fast = {}  # every request through FastAPI's router and the routes themselves
        slow = await answers(stack, "slow")
        single = [200, 202, 400, 202, 400, 400, 400, 400, 200, 200, 422, 400, 415]
        assert [a[0] for a in fast] == [*single, 200, 200, 400, 400, 413, 400, 200, 200]
        assert fast == slow


async def test_the_hot_routes_do_not_go_through_the_router(make_stack: Any) -> None:
    async with make_stack() as stack:
        await stack.http.get("/healthz")
        app = stack.service.http._app
        app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) not in HOT]
        r = await stack.http.post("/v1/messages", content=b'{"topic": "T", "body": "x"}', headers=JSON)
        assert r.status_code == 200, r.text
        r = await stack.http.post(
            "/v1/messages:batch", content=b'{"messages": [{"topic": "T", "body": "y"}]}', headers=JSON
        )
        assert r.status_code == 200 and r.json()["sent"] == 1, r.text
        assert sorted(m.body for m in stack.stored("T")) == [b"x", b"y"]
        labels = {"api": "http", "route": "/v1/messages", "code": "200"}
        assert stack.service.metrics.registry.get_sample_value("rocksidecar_requests_total", labels) == 1


async def test_a_hot_route_that_raises_answers_500_never_2xx(make_stack: Any) -> None:
    """The edge runs before FastAPI's ServerErrorMiddleware: a failure inside a hot route must still be
    a 500 (problem+json), counted as one."""

    async def broken(scope: Any, headers: Any, body: bytes) -> Any:
        raise RuntimeError("store exploded")

    async with make_stack() as stack:
        await stack.http.get("/healthz")
        edge = edge_of(stack)
        edge.fast = {**edge.fast, "/v1/messages": broken}
        r = await stack.http.post("/v1/messages", content=b'{"topic": "T", "body": "x"}', headers=JSON)
        assert r.status_code == 500
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["status"] == 500
        labels = {"api": "http", "route": "/v1/messages", "code": "500"}
        assert stack.service.metrics.registry.get_sample_value("rocksidecar_requests_total", labels) == 1
        assert stack.stored("T") == []
