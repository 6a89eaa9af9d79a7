"""HTTP routes of transactions (issue 29) over devbroker: begin answers the id once the half is stored,
commit/rollback answer after the decision is synced; unknown id 404, the other decision 409, a
repeat 200 with the same answer, and a message that could never be sent 4xx with nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI

from rocksidecar.app.request import Limits
from rocksidecar.app.transactions.http import transaction_routes
from rocksidecar.app.transactions.records import TransactionRecords
from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.transactions import HALF_TOPIC
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
    transaction_routes(
        app, started.coordinator, Limits(max_body_bytes=1024, max_delay_ms=60_000), clock.now_ms
    )
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
