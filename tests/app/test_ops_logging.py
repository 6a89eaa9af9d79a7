"""The operator's log of a running sidecar: an outage tells its story once per cause, start-up says
when RocketMQ is unreachable, and the access log is off unless asked for."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rocksidecar.retry.policy import RetryPolicy
from tests.app.conftest import Stack


def of(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


async def test_an_outage_logs_each_cause_once(make_stack: Any, caplog: pytest.LogCaptureFixture) -> None:
    # A 10-minute first rung: whatever is delivered after the brokers return was brought forward.
    async with make_stack(retry_default=RetryPolicy((600.0,), 1000)) as stack:
        await _outage(stack, caplog)


async def _outage(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    assert (await stack.http.post("/v1/messages", json={"topic": "Outage", "body": "x"})).status_code == 200
    await stack.stop_brokers()  # the route stays cached: sends fail at the brokers
    for i in range(30):
        r = await stack.http.post("/v1/messages", json={"topic": "Outage", "body": f"secret body {i}"})
        assert r.status_code == 202
    isolated = of(caplog, "broker_isolated")
    assert sorted(r.broker for r in isolated) == ["broker-a", "broker-b"]  # once each, not per message
    assert all(r.reason and r.backoff_s > 0 for r in isolated)
    spooled = of(caplog, "message_spooled")
    assert 1 <= len(spooled) <= 3, [r.getMessage() for r in spooled]  # one per cause, not 30
    assert spooled[0].topic == "Outage" and spooled[0].id and spooled[0].error
    assert not any("secret body" in r.getMessage() or "secret body" in str(vars(r)) for r in caplog.records)

    await stack.start_brokers()  # the recovery probe's work: ends the isolation
    await stack.service.recovery.wait()
    await stack.drain()
    assert sorted(r.broker for r in of(caplog, "broker_recovered")) == ["broker-a", "broker-b"]
    rounds = of(caplog, "replay_on_recovery")
    assert sum(r.count for r in rounds) == 30 and not any(r.stopped_early for r in rounds)
    assert len(stack.stored("Outage")) >= 31


async def test_start_up_says_when_the_name_server_is_unreachable(
    make_stack: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with make_stack(namesrv=("127.0.0.1:1",)):
        [started] = of(caplog, "started")
        assert started.levelname == "WARNING" and started.ready is False
        assert "NOT ready" in started.getMessage() and "127.0.0.1:1 unreachable" in started.getMessage()
        [config] = of(caplog, "config")
        assert config.settings["namesrv"] == ["127.0.0.1:1"]


async def test_start_up_says_ready_when_it_is(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    # the fixture started the service before caplog's level applied: ask again the way start() does
    ready, details = await stack.service.readiness()
    assert ready
    caplog.set_level(logging.INFO)
    stack.service.events.started(ready=ready, details=details, addresses={"namesrv": "x"})
    [started] = of(caplog, "started")
    assert started.levelname == "INFO" and started.ready is True


async def test_access_log_is_off_by_default(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    await stack.http.get("/healthz")
    assert of(caplog, "access") == []


async def test_access_log_when_enabled(make_stack: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with make_stack(access_log=True) as stack:
        await stack.http.get("/healthz")
        await stack.http.post("/v1/messages?token=abc", json={"topic": "bad topic", "body": "x"})
        lines = of(caplog, "access")
        assert [(r.method, r.path, r.status) for r in lines] == [
            ("GET", "/healthz", 200),
            ("POST", "/v1/messages", 400),
        ]
        assert all(r.duration_ms >= 0 for r in lines) and "token=abc" not in str(vars(lines[1]))
