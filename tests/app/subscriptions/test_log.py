"""Subscriptions log what the app did to a delivery (5xx, 503, no answer) and each move to the group's
DLQ: one line per cause, then one summary per window (clock injected). Never a body."""

from __future__ import annotations

import dataclasses
import logging
from typing import cast

import orjson
import pytest

from rocksidecar.app.http_client import Answer, HttpClient, PostError
from rocksidecar.app.subscriptions.bulk import BulkPush
from rocksidecar.app.subscriptions.log import DeliveryLog
from rocksidecar.app.subscriptions.push import HttpPush
from rocksidecar.rmq.consumer.config import ConsumeStatus
from tests.app.subscriptions.test_push import MQ, SPEC, Recorded, message

LOGGER = "rocksidecar.subscriptions"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def push(rec: Recorded, log: DeliveryLog, spec: object = SPEC) -> HttpPush:
    return HttpPush(cast(type(SPEC), spec), cast(HttpClient, rec), sleep=rec.sleep, log=log)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER]


async def test_a_500_is_logged_once_per_window_then_summarised(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    clock = Clock()
    log = DeliveryLog(clock=clock)
    rec = Recorded([Answer(500)] * 4)
    for _ in range(3):
        assert await push(rec, log)([message()], MQ) is ConsumeStatus.RECONSUME_LATER
    msg_id = message().msg_id
    assert lines(caplog) == [("WARNING", f"subscription orders: the app answered 500 for message {msg_id}")]
    log.flush()  # the window is not over: nothing yet
    assert len(lines(caplog)) == 1
    clock.now += 10.0
    log.flush()
    assert lines(caplog)[1] == (
        "WARNING",
        "2 more subscription_failed events of the same cause in the last 10 s",
    )
    await push(rec, log)([message()], MQ)  # a new window: its first line is written again
    assert len(lines(caplog)) == 3
    assert all("raw body" not in text for _, text in lines(caplog))


async def test_a_503_is_logged_as_later_and_a_500_apart(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    log = DeliveryLog(clock=Clock())
    rec = Recorded([Answer(503), Answer(503), Answer(500)])
    assert await push(rec, log)([message()], MQ) is ConsumeStatus.RECONSUME_LATER
    got = lines(caplog)
    assert [level for level, _ in got] == ["INFO", "WARNING"]  # one 503 line (throttled), one 500 line
    assert "answered 503" in got[0][1] and "later" in got[0][1] and "answered 500" in got[1][1]


async def test_no_answer_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    log = DeliveryLog(clock=Clock())
    rec = Recorded([PostError("the app's answer has more than 100 headers")])
    await push(rec, log)([message()], MQ)
    [(level, text)] = lines(caplog)
    reason = "the app's answer has more than 100 headers"
    assert level == "WARNING"
    assert (
        text == f"subscription orders: no usable answer from the app for message {message().msg_id}: {reason}"
    )


async def test_the_last_failure_before_the_dlq_logs_the_move(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    log = DeliveryLog(clock=Clock())
    spec = dataclasses.replace(SPEC, max_reconsume_times=3)
    early, last = message(), dataclasses.replace(message(), reconsume_times=3)
    rec = Recorded([Answer(500), Answer(500)])
    await push(rec, log, spec)([early], MQ)  # reconsume_times 2 < 3: back to the broker, not the DLQ
    assert not any("DLQ" in text for _, text in lines(caplog))
    await push(rec, log, spec)([last], MQ)
    dlq = [(level, text) for level, text in lines(caplog) if "DLQ" in text]
    assert dlq == [("ERROR", f"subscription orders: message {last.msg_id} moved to %DLQ%G (failed 4 times)")]


async def test_bulk_drop_logs_the_move_to_the_dlq(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    log = DeliveryLog(clock=Clock())
    msg = message()
    body = orjson.dumps({"statuses": [{"entryId": str(msg.queue_offset), "status": "DROP"}]})
    rec = Recorded([Answer(200, {}, body)])
    bulk = BulkPush(SPEC, cast(HttpClient, rec), sleep=rec.sleep, log=log)
    assert await bulk([msg], MQ) == [ConsumeStatus.DEAD_LETTER]
    assert lines(caplog) == [
        ("ERROR", f"subscription orders: message {msg.msg_id} moved to %DLQ%G (the app answered DROP)")
    ]
