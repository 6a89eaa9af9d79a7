"""HttpPush: the CloudEvents request it makes and how the app's answer becomes a consume status."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import cast
from urllib.parse import unquote

import pytest

from rocksidecar.app.http_client import Answer, HttpClient, PostError
from rocksidecar.app.subscriptions.push import (
    DEFAULT_LATER_S,
    MAX_LATER_S,
    MIN_LATER_S,
    HttpPush,
    retry_after_s,
)
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.app.subscriptions.stream import Answer as StreamAnswer
from rocksidecar.app.subscriptions.stream import StreamHub
from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY
from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.message import MessageExt, MessageQueue
from tests.rmq.consumer.factory import stored

SPEC = SubscriptionSpec(name="orders", topic="T", group="G", endpoint="http://127.0.0.1:9/in")
MQ = MessageQueue("T", "broker-a", 3)


def message(**props: str) -> MessageExt:
    msg = stored(41, b"\x00\xffraw body", queue_id=3, tags="TagA", reconsume_times=2)
    base = {**msg.properties, "KEYS": "k1 k2", **props}
    return dataclasses.replace(msg, properties=base, born_timestamp_ms=1_700_000_000_123)


def parse_lines(lines: bytes) -> dict[str, str]:
    """The header lines HttpPush hands the client, as the app would read them; strict: each line is
    ``name: value`` ending in CRLF, and no name comes twice."""
    assert lines.endswith(b"\r\n"), lines
    out: dict[str, str] = {}
    for line in lines[:-2].split(b"\r\n"):
        name, sep, value = line.partition(b": ")
        assert sep and name and b"\r" not in line and b"\n" not in line, line
        assert name.decode() not in out, name
        out[name.decode("latin-1")] = value.decode("latin-1")
    return out


@dataclasses.dataclass
class Request:
    url: str
    body: bytes
    headers: Mapping[str, str]
    timeout_s: float


class Recorded:
    """Stands in for HttpClient: records each POST (HttpPush's header lines parsed back, BulkPush's
    headers as they are) and answers from a script."""

    def __init__(self, statuses: list[Answer | Exception]) -> None:
        self.statuses = statuses
        self.requests: list[Request] = []
        self.sleeps: list[float] = []
        self.outcomes: list[str] = []
        self.traces: list[str | None] = []  # the traceparent of each delivery's message, told the metrics

    async def post_lines(self, url: str, lines: bytes, body: bytes, timeout_s: float) -> Answer:
        return await self.post(url, body, parse_lines(lines), timeout_s)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        self.requests.append(Request(url, body, headers, timeout_s))
        answer = self.statuses.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def push(self, spec: SubscriptionSpec = SPEC) -> HttpPush:
        return HttpPush(
            spec,
            cast(HttpClient, self),
            on_delivery=lambda _s, outcome, _t, msg: (
                self.outcomes.append(outcome),
                self.traces.append(msg.properties.get(TRACEPARENT_PROPERTY)),
            ),
            sleep=self.sleep,
            wall_s=lambda: 1_800_000_000.0,
        )


async def test_binary_content_mode_headers_and_untouched_body() -> None:
    rec = Recorded([Answer(200)])
    msg = message(**{"content-type": "application/json", "region": "eu", "Weird-Name": "v é"})
    assert await rec.push()([msg], MQ) is ConsumeStatus.SUCCESS
    req = rec.requests[0]
    assert req.url == SPEC.endpoint
    assert req.body == b"\x00\xffraw body"
    h = req.headers
    assert h["ce-specversion"] == "1.0"
    assert h["ce-id"] == "U00000041"  # UNIQ_KEY
    assert h["ce-source"] == "rocketmq://broker-a/T"
    assert h["ce-type"] == "org.apache.rocketmq.message"
    assert h["ce-time"] == "2023-11-14T22:13:20.123Z"
    assert h["content-type"] == "application/json"
    assert (h["ce-rocketmqtags"], h["ce-rocketmqkeys"]) == ("TagA", "k1 k2")
    assert (h["ce-rocketmqqueue"], h["ce-rocketmqoffset"], h["ce-rocketmqbroker"]) == ("3", "41", "broker-a")
    assert h["ce-rocketmqreconsumetimes"] == "2" and h["ce-rocketmqgroup"] == "G"
    assert h["ce-region"] == "eu"
    assert json.loads(unquote(h["ce-rocketmqproperties"])) == {"Weird-Name": "v é"}
    assert rec.outcomes == ["ok"]


async def test_each_delivery_tells_the_metrics_its_messages_trace() -> None:
    """For the latency's exemplar (app.exemplars parses it: a producer's property is not trusted here)."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    rec = Recorded([Answer(503), Answer(200), Answer(200)])
    assert await rec.push()([message(TRACE_CONTEXT=traceparent)], MQ) is ConsumeStatus.SUCCESS
    assert await rec.push()([message()], MQ) is ConsumeStatus.SUCCESS
    assert rec.outcomes == ["later", "ok", "ok"] and rec.traces == [traceparent, traceparent, None]


async def test_no_content_type_property_is_octet_stream() -> None:
    rec = Recorded([Answer(204)])
    assert await rec.push()([message()], MQ) is ConsumeStatus.SUCCESS
    assert rec.requests[0].headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize("status", [400, 404, 409, 500, 502, 301])
async def test_other_statuses_are_failures(status: int) -> None:
    rec = Recorded([Answer(status)])
    assert await rec.push()([message()], MQ) is ConsumeStatus.RECONSUME_LATER
    assert rec.outcomes == ["failed"] and rec.sleeps == []


async def test_orderly_failure_suspends_the_queue() -> None:
    rec = Recorded([Answer(500)])
    push = rec.push(dataclasses.replace(SPEC, mode="orderly"))
    assert await push([message()], MQ) is ConsumeStatus.SUSPEND


@pytest.mark.parametrize("error", [PostError("no answer within 5 s"), PostError("ConnectionRefusedError")])
async def test_timeout_or_no_answer_is_a_failure(error: Exception) -> None:
    rec = Recorded([error])
    assert await rec.push()([message()], MQ) is ConsumeStatus.RECONSUME_LATER
    assert rec.outcomes == ["error"]


async def test_the_post_carries_the_subscription_timeout() -> None:
    rec = Recorded([Answer(200)])
    await rec.push(dataclasses.replace(SPEC, timeout_s=0.25))([message()], MQ)
    assert rec.requests[0].timeout_s == 0.25


async def test_429_and_503_wait_for_retry_after_and_are_not_failures() -> None:
    date = format_datetime(datetime.fromtimestamp(1_800_000_000 + 30, UTC), usegmt=True)
    rec = Recorded(
        [
            Answer(429, {"retry-after": "7"}),
            Answer(503, {"retry-after": date}),
            Answer(503),
            Answer(200),
        ]
    )
    assert await rec.push()([message()], MQ) is ConsumeStatus.SUCCESS
    assert rec.sleeps == [7.0, 30.0, DEFAULT_LATER_S]
    assert rec.outcomes == ["later", "later", "later", "ok"]
    # the same event each time: the app can tell a retry by ce-id
    assert len({r.headers["ce-id"] for r in rec.requests}) == 1


def test_retry_after_parsing() -> None:
    assert retry_after_s("120", 0.0) == 120.0
    assert retry_after_s("99999999", 0.0) == MAX_LATER_S
    assert retry_after_s("soon", 0.0) == DEFAULT_LATER_S
    assert retry_after_s(None, 0.0) == DEFAULT_LATER_S
    assert retry_after_s("-5", 0.0) == DEFAULT_LATER_S
    assert retry_after_s("1.5", 0.0) == DEFAULT_LATER_S
    assert retry_after_s("\u0661", 0.0) == DEFAULT_LATER_S


PAST = format_datetime(datetime.fromtimestamp(100, UTC), usegmt=True)


@pytest.mark.parametrize("value", ["0", "000", PAST])
def test_a_retry_after_of_zero_or_in_the_past_still_waits(value: str) -> None:
    """An app answering 503 with Retry-After 0 (or a past date) on every POST was POSTed again at once,
    forever: about 2 900 POSTs a second for one message on this machine, a core spent on it. A floor."""
    assert retry_after_s(value, 200.0) == MIN_LATER_S > 0


def test_ce_time_is_the_isoformat_of_the_born_timestamp() -> None:
    import random
    from datetime import UTC, datetime, timedelta

    from rocksidecar.app.subscriptions.cloudevents import ce_time

    rnd = random.Random(7)
    samples = [0, 999, 1000, 1_700_000_000_123, 1_700_000_000_999, 253_402_300_799_999]
    # before 1970 too (a producer's clock): -1 was the cache's "none yet" (".999Z"), and strftime wrote
    # the years before 1000 with fewer than four digits
    samples += [-1, -999, -1000, -1001, -62_135_596_800_000, -59_000_000_000_000]
    samples += [rnd.randrange(-62_135_596_800_000, 253_402_300_799_999) for _ in range(20_000)]
    for ms in samples:  # the per-second cache against exact integer arithmetic, in and out of order
        # (ms / 1000 as a float, the formula before, lost a millisecond near year 9999)
        exact = datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
        expected = exact.isoformat(timespec="milliseconds")
        assert ce_time(ms) == expected.replace("+00:00", "Z"), ms


@pytest.mark.parametrize("born", [2**63 - 1, 2**62, 253_402_300_800_000, -62_135_596_800_001, -(2**63)])
async def test_a_born_timestamp_past_rfc_3339_s_years_is_delivered_without_a_time(born: int) -> None:
    """The born timestamp is the producer's own 64-bit number: 2**62 failed every delivery of the message
    ("year 146140482 is out of range") until it was dead-lettered, the app never seeing it. The time is
    an optional attribute: left out, on the short path and on headers_for's (a user property)."""
    from rocksidecar.app.subscriptions.cloudevents import ce_time

    assert ce_time(born) is None
    rec = Recorded([Answer(200), Answer(200)])
    for plain in (message(), message(region="eu")):
        msg = dataclasses.replace(plain, born_timestamp_ms=born)
        assert await rec.push()([msg], MQ) is ConsumeStatus.SUCCESS
    assert rec.outcomes == ["ok", "ok"]
    for req in rec.requests:
        assert "ce-time" not in req.headers and req.headers["ce-id"] == "U00000041"
    assert rec.requests[1].headers["ce-region"] == "eu"
    edges = {-62_135_596_800_000: "0001-01-01T00:00:00.000Z", 253_402_300_799_999: "9999-12-31T23:59:59.999Z"}
    for ms, text in edges.items():
        assert ce_time(ms) == text


@pytest.mark.parametrize(("retry_after_ms", "waited"), [(1, MIN_LATER_S), (0, DEFAULT_LATER_S), (2500, 2.5)])
async def test_a_grpc_later_waits_at_least_the_floor(retry_after_ms: int, waited: float) -> None:
    """ACK_LATER with retry_after_ms=1 offered the message again after 1 ms: the same spin as a
    Retry-After of 0."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    hub = StreamHub(SPEC, sleep=sleep)
    delivered = asyncio.create_task(hub.deliver(message(), MQ))
    first = await hub.next()
    hub.ack(first.delivery_id, StreamAnswer.LATER, retry_after_ms)
    again = await hub.next()
    hub.ack(again.delivery_id, StreamAnswer.OK)
    assert await delivered is True
    assert sleeps == [waited]
