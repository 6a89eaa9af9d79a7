"""A start that was not ready logs the moment it becomes ready, once, with what it waited for."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from rocksidecar.app.readiness import Readiness
from rocksidecar.rmq import NameServerClient, RocketMQError
from rocksidecar.rmq.producer import Producer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Routes:
    def cached(self, _topic: str) -> None:
        return None

    def topics(self) -> list[str]:
        return []


class FakeProducer:
    routes = Routes()

    def fault_table(self) -> list[Any]:
        return []


class FakeNameServer:
    def __init__(self) -> None:
        self.up = False

    async def get_cluster_info(self) -> dict[str, object]:
        if not self.up:
            raise RocketMQError("connection refused")
        return {"brokerAddrTable": {"broker-a": {"brokerAddrs": {"0": "127.0.0.1:10911"}}}}


class Store:
    healthy = True
    last_error = None


def readiness(namesrv: FakeNameServer, clock: Clock) -> Readiness:
    producer, ns = cast(Producer, FakeProducer()), cast(NameServerClient, namesrv)
    return Readiness(producer, ns, Store(), (), clock=clock)


def ready_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "ready"]


async def test_not_ready_at_start_logs_ready_once_with_what_it_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "rocksidecar.events")
    clock, namesrv = Clock(), FakeNameServer()
    r = readiness(namesrv, clock)
    assert (await r.check())[0] is False  # the start's check
    clock.now += 3.0
    assert (await r.check())[0] is False
    assert ready_lines(caplog) == []
    namesrv.up = True
    clock.now += 9.5
    assert (await r.check())[0] is True
    [line] = ready_lines(caplog)
    assert line.levelno == logging.INFO
    assert (
        line.getMessage()
        == "ready after 12.5 s (waited for: no broker known: the name server is unreachable)"
    )
    clock.now += 3.0
    assert (await r.check())[0] is True
    assert len(ready_lines(caplog)) == 1  # once


async def test_ready_at_start_logs_no_ready_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "rocksidecar.events")
    clock, namesrv = Clock(), FakeNameServer()
    namesrv.up = True
    r = readiness(namesrv, clock)
    assert (await r.check())[0] is True  # the start logs "rocksidecar ready" itself (app.events)
    namesrv.up = False
    clock.now += 3.0
    assert (await r.check())[0] is False
    namesrv.up = True
    clock.now += 3.0
    assert (await r.check())[0] is True
    assert ready_lines(caplog) == []
