"""Issue 27 item 1 against a running sidecar and devbroker: dead letters that die again at once (the
brokers refuse with MESSAGE_ILLEGAL, a final error) are re-driven once by one ``{"all": true}``, which
answers; the dead-letter counter counts each once."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.retry import admin
from rocksidecar.rmq.codes import ResponseCode
from tests.app.conftest import Stack

N = 25
SETTLE_S = 30.0  # a safety net against the old endless loop, never a synchronisation point


def _sample(stack: Stack, name: str) -> float:
    return stack.service.metrics.registry.get_sample_value(name) or 0.0


def _replays(stack: Stack) -> float:
    """Replay attempts, whatever their outcome."""
    registry = stack.service.metrics.registry
    outcomes = ("delivered", "rescheduled", "dead")
    return sum(
        registry.get_sample_value("rocksidecar_replays_total", {"outcome": o}) or 0.0 for o in outcomes
    )


async def test_redrive_all_of_letters_refused_again_touches_each_once(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "PURGE_CHUNK", 5)  # pages of 5, as 3 001 letters were pages of 1 000
    for broker in stack.cluster.brokers.values():
        broker.faults.fail_all_sends(ResponseCode.MESSAGE_ILLEGAL, "too odd")
    for i in range(N):
        r = await stack.http.post(
            "/v1/messages", params={"ack": "spool"}, json={"topic": "Odd", "body": f"x{i}"}
        )
        assert r.status_code == 202
    await stack.drain()
    assert stack.service.retry.stats().dead == N
    dead_before = _sample(stack, "rocksidecar_dead_letters_total")
    replays_before = _replays(stack)

    async with asyncio.timeout(SETTLE_S):
        r = await stack.http.post("/v1/admin/dead-letters:redrive", json={"all": True})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert (doc["redriven"], doc["skipped"], doc["nextCursor"]) == (N, 0, None)
        assert 0 <= doc["stillDead"] <= N
        await stack.drain()  # the replay meets the refusal once more and buries each again

    assert stack.service.retry.stats().dead == N
    assert _sample(stack, "rocksidecar_dead_letters_total") - dead_before == N
    assert _replays(stack) - replays_before == N  # attempted exactly once each
