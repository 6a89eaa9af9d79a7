"""Warnings that repeat while a broker is down: one line per cause, then one summary per 10 s."""

from __future__ import annotations

import logging
from collections.abc import Collection

import pytest

from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.consumer.offset_store import RemoteOffsetStore
from rocksidecar.rmq.errors import ConnectError
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.throttle import MAX_CAUSES, RepeatLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class DownApi(BrokerApi):
    """Every offset update fails as against a stopped broker."""

    def __init__(self) -> None:
        super().__init__(RemotingClient())
        self.calls = 0

    async def update_consumer_offset(self, *args: object, **kw: object) -> None:
        self.calls += 1
        raise ConnectError("connection refused", addr="127.0.0.1:10911")

    async def heartbeat(self, *args: object, **kw: object) -> None:
        self.calls += 1
        raise ConnectError("connection refused", addr="127.0.0.1:10911")


async def broker_addr(name: str) -> str | None:
    return "127.0.0.1:10911"


def lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


async def test_200_failed_persists_in_10_s_give_one_line_and_one_summary_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, api = Clock(), DownApi()
    store = RemoteOffsetStore(api, "G", broker_addr, repeat_log=(log := RepeatLog(10.0, clock)))
    mqs: Collection[MessageQueue] = [MessageQueue("T", "broker-a", q) for q in range(4)]
    for mq in mqs:
        store.update(mq, 5, increase_only=False)
    caplog.set_level(logging.WARNING, "rocksidecar.rmq.consumer.offset_store")
    for i in range(50):  # 4 queues x 50 rounds: 200 failures within the window
        clock.now = i * 0.19
        await store.persist_all(mqs)
    assert api.calls == 200
    first = lines(caplog, "rocksidecar.rmq.consumer.offset_store")
    assert len(first) == 1 and "persisting the offset" in first[0]
    clock.now = 10.0
    log.flush()
    got = lines(caplog, "rocksidecar.rmq.consumer.offset_store")
    assert len(got) == 2
    assert got[1].startswith("199 more like this in 10 s, the last: ") and "connection refused" in got[1]
    log.flush()  # the window is closed: nothing more to say
    assert len(lines(caplog, "rocksidecar.rmq.consumer.offset_store")) == 2


async def test_heartbeats_to_a_stopped_broker_give_one_line_and_one_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, api = Clock(), DownApi()
    log = RepeatLog(10.0, clock)
    instance = ClientInstance("127.0.0.1:9876", api=api, client_id="c@1", repeat_log=log)
    instance.register_producer("P")
    instance.hold_routes(lambda: {"broker-a": "127.0.0.1:10911"})  # a producer's route names it
    caplog.set_level(logging.WARNING, "rocksidecar.rmq.client_instance")
    for i in range(200):
        clock.now = i * 0.04
        await instance.heartbeat()
    assert api.calls == 200 and len(lines(caplog, "rocksidecar.rmq.client_instance")) == 1
    clock.now = 10.0
    log.flush()
    got = lines(caplog, "rocksidecar.rmq.client_instance")
    assert len(got) == 2 and got[1].startswith("199 more like this in 10 s")
    await instance.close()


def test_causes_are_kept_apart_and_a_quiet_window_has_no_summary(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = RepeatLog(10.0, clock)
    logger = logging.getLogger("rmq.test.repeat")
    caplog.set_level(logging.WARNING, logger.name)
    log.warning(logger, ("pull", "broker-a"), "pull of a failed")
    log.warning(logger, ("pull", "broker-b"), "pull of b failed")
    log.warning(logger, ("pull", "broker-a"), "pull of a failed again")
    clock.now = 11.0
    log.flush()
    assert lines(caplog, logger.name) == [
        "pull of a failed",
        "pull of b failed",
        "1 more like this in 10 s, the last: pull of a failed again",
    ]
    log.warning(logger, ("pull", "broker-a"), "pull of a failed, a new window")
    assert lines(caplog, logger.name)[-1] == "pull of a failed, a new window"


def test_the_number_of_causes_held_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = RepeatLog(10.0, clock)
    logger = logging.getLogger("rmq.test.repeat")
    caplog.set_level(logging.WARNING, logger.name)
    for i in range(MAX_CAUSES + 100):
        log.warning(logger, ("queue", i), "queue %d failed", i)
    assert len(lines(caplog, logger.name)) == MAX_CAUSES + 1  # the rest share one key
    clock.now = 10.0
    log.flush()
    assert (
        lines(caplog, logger.name)[-1]
        == f"99 more like this in 10 s, the last: queue {MAX_CAUSES + 99} failed"
    )
