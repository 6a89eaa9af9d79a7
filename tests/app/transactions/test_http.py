"""HTTP routes of transactions (issue 29) over devbroker: begin answers the id once the half is stored,
commit/rollback answer after the decision is synced; unknown id 404, the other decision 409, a
repeat 200 with the same answer, and a message that could never be sent 4xx with nothing stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from rocksidecar.app.idempotency import COLUMN_FAMILIES as IDEMPOTENCY_CFS
from rocksidecar.app.idempotency import MAX_KEY_CHARS, IdempotencyStore
from rocksidecar.app.request import Limits
from rocksidecar.app.transactions.http import transaction_routes
from rocksidecar.app.transactions.records import TransactionRecords
from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.transactions import HALF_TOPIC
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.app.transactions.conftest import Started
from tests.fakes import FakeWallClock

TOPIC = "TxHttp"


@dataclass
class Env:
    cluster: DevCluster
    http: httpx.AsyncClient
    records: TransactionRecords

    def real(self) -> list[str | None]:
        return [m.uniq_key for b in self.cluster.brokers.values() for m in b.messages(TOPIC)]

    def halves(self) -> int:
        return sum(len(b.messages(HALF_TOPIC)) for b in self.cluster.brokers.values())


@pytest.fixture
async def env(cluster: DevCluster, clock: FakeWallClock, started: Started) -> AsyncIterator[Env]:
    app = FastAPI()
    kv = MemoryKV(list(IDEMPOTENCY_CFS))
    idempotency = IdempotencyStore(kv, GroupCommitWriter(kv), window_s=60, now_ms=clock.now_ms)
    limits = Limits(max_body_bytes=1024, max_delay_ms=60_000)
    transaction_routes(app, started.coordinator, limits, clock.now_ms, idempotency)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as http:
        yield Env(cluster, http, started.records)


async def test_begin_commit_repeat_conflict(env: Env) -> None:
    begun = await env.http.post(
        "/v1/transactions", json={"topic": TOPIC, "body": "hi", "transactionKey": "o-1"}
    )
    assert begun.status_code == 201, begun.text
    doc = begun.json()
    assert doc["state"] == "PREPARED" and doc["transactionKey"] == "o-1"
    tx_id = doc["id"]
    assert env.real() == []
    first = await env.http.post(f"/v1/transactions/{tx_id}:commit")
    assert first.status_code == 200 and first.json()["state"] == "COMMITTED" and first.json()["acknowledged"]
    again = await env.http.post(f"/v1/transactions/{tx_id}:commit")
    assert again.status_code == 200 and again.json() == first.json()
    conflict = await env.http.post(f"/v1/transactions/{tx_id}:rollback")
    assert conflict.status_code == 409 and conflict.headers["content-type"] == "application/problem+json"
    assert env.real() == [tx_id]
    status = await env.http.get(f"/v1/transactions/{tx_id}")
    assert status.json()["state"] == "COMMITTED"


async def test_rollback_then_commit_is_409_and_nothing_delivered(env: Env) -> None:
    tx_id = (await env.http.post("/v1/transactions", json={"topic": TOPIC, "body": "x"})).json()["id"]
    assert (await env.http.post(f"/v1/transactions/{tx_id}:rollback")).json()["state"] == "ROLLED_BACK"
    assert (await env.http.post(f"/v1/transactions/{tx_id}:commit")).status_code == 409
    assert env.real() == []


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"topic": "RMQ_SYS_TRANS_HALF_TOPIC", "body": "x"}, "topic"),
        ({"topic": TOPIC, "body": "x" * 2000}, "body"),
        ({"topic": TOPIC, "body": "x", "delayMs": 1000}, "delayMs"),
        ({"topic": TOPIC, "body": "x", "transactionKey": 5}, "transactionKey"),
        ({"topic": TOPIC, "body": "x", "properties": {"PGROUP": "other"}}, "properties.PGROUP"),
        ({"topic": TOPIC, "body": "x", "surprise": 1}, "surprise"),
    ],
)
async def test_bad_input_is_4xx_before_anything_is_stored(
    env: Env, doc: dict[str, object], field: str
) -> None:
    resp = await env.http.post("/v1/transactions", json=doc)
    assert 400 <= resp.status_code < 500, resp.text
    assert resp.json()["field"] == field
    assert env.halves() == 0 and env.records.all() == []


async def test_unknown_id_is_404(env: Env) -> None:
    for path in ("/v1/transactions/nope:commit", "/v1/transactions/nope:rollback"):
        assert (await env.http.post(path)).status_code == 404
    assert (await env.http.get("/v1/transactions/nope")).status_code == 404


BEGIN = {"topic": TOPIC, "body": "order 1 placed", "transactionKey": "order-1"}


async def test_the_sidecar_answers_a_repeated_begin_with_its_first_transaction(
    make_stack: Callable[..., Any],
) -> None:
    """README: a request with an Idempotency-Key gets the first answer for the same key back and sends
    nothing again; POST /v1/transactions takes what POST /v1/messages takes. A client retrying a begin
    after a timeout must not store a second half message under the same transactionKey (which the app's
    check endpoint, told that key, may well commit too)."""
    body = {**BEGIN, "topic": "Orders"}
    headers = {"Idempotency-Key": "begin-order-1"}
    async with make_stack() as s:
        first = await s.http.post("/v1/transactions", json=body, headers=headers)
        again = await s.http.post("/v1/transactions", json=body, headers=headers)
        listed = (await s.http.get("/v1/admin/transactions")).json()["items"]
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    assert (again.status_code, again.json(), again.headers.get("idempotent-replayed")) == (
        201,
        first.json(),
        "true",
    )
    assert [t["id"] for t in listed] == [first.json()["id"]]


async def test_concurrent_begins_with_one_key_begin_once(env: Env) -> None:
    """A repeat sent while the first begin is still storing its half waits for its answer."""
    headers = {"Idempotency-Key": "b-1"}
    answers = await asyncio.gather(
        *(env.http.post("/v1/transactions", json=BEGIN, headers=headers) for _ in range(2))
    )
    assert [a.status_code for a in answers] == [201, 201]
    assert answers[0].json() == answers[1].json()
    assert sorted(a.headers.get("idempotent-replayed", "") for a in answers) == ["", "true"]
    assert env.halves() == 1 and len(env.records.all()) == 1


async def test_a_key_reused_for_another_begin_is_422_and_begins_nothing(env: Env) -> None:
    headers = {"Idempotency-Key": "b-2"}
    first = await env.http.post("/v1/transactions", json=BEGIN, headers=headers)
    assert first.status_code == 201, first.text
    other = await env.http.post("/v1/transactions", json={**BEGIN, "body": "order 2"}, headers=headers)
    assert (other.status_code, other.json()["field"]) == (422, "Idempotency-Key"), other.text
    # the same request in other spacing or key order is the same request
    same = await env.http.post(
        "/v1/transactions", content=b'{"transactionKey":"order-1", "body":"order 1 placed","topic":"TxHttp"}',
        headers={**headers, "content-type": "application/json"},
    )  # fmt: skip
    assert (same.status_code, same.json()["id"]) == (201, first.json()["id"])
    assert env.halves() == 1 and len(env.records.all()) == 1


async def test_a_bad_key_is_400_naming_it_and_begins_nothing(env: Env) -> None:
    for key in ("", "k" * (MAX_KEY_CHARS + 1)):
        resp = await env.http.post("/v1/transactions", json=BEGIN, headers={"Idempotency-Key": key})
        assert (resp.status_code, resp.json()["field"]) == (400, "Idempotency-Key"), resp.text
    assert env.halves() == 0 and env.records.all() == []


async def test_the_openapi_of_a_begin_documents_the_key_and_the_replayed_header(env: Env) -> None:
    doc = (await env.http.get("/openapi.json")).json()["paths"]["/v1/transactions"]["post"]
    assert [p["name"] for p in doc["parameters"]] == ["Idempotency-Key"]
    assert "Idempotent-Replayed" in doc["responses"]["201"]["headers"]
