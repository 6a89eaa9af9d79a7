"""Health, readiness, metrics, the bearer token, Idempotency-Key, and the published OpenAPI."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.app.conftest import Stack


async def test_health_and_readiness(stack: Stack) -> None:
    assert (await stack.http.get("/healthz")).json() == {"status": "ok"}
    ready = await stack.http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["store"] == "ok"


async def test_readiness_shows_the_broker_fault_table(stack: Stack) -> None:
    stack.cluster.brokers["broker-a"].faults.fail_all_sends(1, "down for the test")
    for _ in range(8):  # round robin reaches broker-a, fails over, and isolates it
        await stack.http.post("/v1/messages", json={"topic": "Faulty", "body": "x"})
    brokers = {b["broker"]: b for b in (await stack.http.get("/readyz")).json()["brokers"]}
    assert brokers["broker-a"]["state"] == "isolated" and brokers["broker-a"]["notAvailableForS"] > 500
    assert brokers["broker-b"]["state"] == "available" and brokers["broker-b"]["notAvailableForS"] == 0


async def test_no_name_server_still_accepts_work_but_is_not_ready(make_stack: Any) -> None:
    async with make_stack(namesrv=("127.0.0.1:1",)) as stack:
        assert (await stack.http.get("/healthz")).status_code == 200
        ready = await stack.http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["nameServer"] == "unreachable"
        r = await stack.http.post("/v1/messages", json={"topic": "T", "body": "x"})
        assert r.status_code == 202 and r.json()["status"] == "SPOOLED"


async def test_metrics_count_requests_messages_and_broker_state(stack: Stack) -> None:
    await stack.http.post("/v1/messages", json={"topic": "M", "body": "x"})
    await stack.http.post("/v1/messages", json={"topic": "bad!", "body": "x"})
    text = (await stack.http.get("/metrics")).text
    assert 'rocksidecar_requests_total{api="http",code="200",route="/v1/messages"} 1.0' in text
    assert 'rocksidecar_messages_total{outcome="sent"} 1.0' in text
    assert 'rocksidecar_messages_total{outcome="rejected"} 1.0' in text
    assert "rocksidecar_broker_backoff_seconds{broker=" in text and "rocksidecar_retry_pending 0.0" in text
    assert "# HELP rocksidecar_retry_oldest_age_seconds Age of the oldest message" in text


async def test_bearer_token_guards_the_api_but_not_liveness(make_stack: Any) -> None:
    async with make_stack(auth_token="s3cret") as stack:
        ok = await stack.http.post("/v1/messages", json={"topic": "A", "body": "x"})
        assert ok.status_code == 200
        del stack.http.headers["authorization"]
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            r = await stack.http.post("/v1/messages", json={"topic": "A", "body": "x"}, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert r.json()["field"] == "Authorization"
        assert len(stack.stored("A")) == 1
        assert (await stack.http.get("/healthz")).status_code == 200
        for path in ("/metrics", "/readyz"):  # they name brokers and show store errors
            assert (await stack.http.get(path)).status_code == 401, path


async def test_idempotency_key_returns_the_first_answer_and_sends_once(stack: Stack) -> None:
    doc = {"topic": "Idem", "body": "once"}
    first = await stack.http.post("/v1/messages", json=doc, headers={"Idempotency-Key": "k-1"})
    again = await stack.http.post("/v1/messages", json=doc, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert len(stack.stored("Idem")) == 1
    other = await stack.http.post(
        "/v1/messages", json={"topic": "Idem", "body": "different"}, headers={"Idempotency-Key": "k-1"}
    )
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"
    assert len(stack.stored("Idem")) == 1


async def test_concurrent_repeats_of_one_key_send_once(stack: Stack) -> None:
    doc = {"messages": [{"topic": "IdemC", "body": str(i)} for i in range(20)]}
    answers = await asyncio.gather(
        *(
            stack.http.post("/v1/messages:batch", json=doc, headers={"Idempotency-Key": "batch-7"})
            for _ in range(5)
        )
    )
    assert len({a.text for a in answers}) == 1
    assert len(stack.stored("IdemC")) == 20


async def test_concurrent_requests_with_one_key_and_different_bodies_get_422(stack: Stack) -> None:
    """Issue 11 item 2: a different request joining the first one's in-flight answer must be refused,
    or it is answered 2xx and never stored."""
    for broker in stack.cluster.brokers.values():
        broker.faults.latency_s = 0.2  # the first request is still in flight when the others arrive
    answers = await asyncio.gather(
        *(
            stack.http.post(
                "/v1/messages",
                json={"topic": "IdemD", "body": f"conc-body-{i}"},
                headers={"Idempotency-Key": "d"},
            )
            for i in range(10)
        )
    )
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] + [422] * 9, codes
    assert all(a.json()["field"] == "Idempotency-Key" for a in answers if a.status_code == 422)
    [ok] = [a for a in answers if a.status_code == 200]
    [stored] = stack.stored("IdemD")
    assert stored.uniq_key == ok.json()["id"]
    assert stored.body == f"conc-body-{answers.index(ok)}".encode()


async def test_idempotency_answers_survive_a_restart(make_stack: Any) -> None:
    doc = {"topic": "IdemR", "body": "x"}
    async with make_stack() as stack:
        first = (await stack.http.post("/v1/messages", json=doc, headers={"Idempotency-Key": "r"})).json()
    async with make_stack() as stack:  # same data directory, new process state
        again = (await stack.http.post("/v1/messages", json=doc, headers={"Idempotency-Key": "r"})).json()
        assert again == first and not stack.stored("IdemR")  # a fresh devbroker: nothing sent again


async def test_openapi_is_published(stack: Stack) -> None:
    spec = (await stack.http.get("/openapi.json")).json()
    assert {"/v1/messages", "/v1/messages:batch", "/v1/messages/{id}"} <= set(spec["paths"])
    send = spec["paths"]["/v1/messages"]["post"]["responses"]
    assert {"200", "202", "400", "413", "422", "503"} <= set(send)
