"""The operator's log: formatters (JSON lines parse, stable field names), throttling per cause with an
injected clock, redacted configuration, and the fault table's state-change hook."""

from __future__ import annotations

import io
import logging
import sys

import orjson
import pytest

from rocksidecar.app.config import Settings, redacted
from rocksidecar.app.events import OpsEvents, cause
from rocksidecar.app.logs import TextFormatter, Throttle, configure
from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq.producer import LatencyFaultTolerance
from rocksidecar.rmq.throttle import MAX_CAUSES
from tests.fakes import FakeClock


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, name: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "event", None) == name]


@pytest.fixture
def capture() -> Capture:
    handler = Capture()
    logger = logging.getLogger("test.ops")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield handler
    logger.removeHandler(handler)


def events(clock: FakeClock, **kw: float) -> OpsEvents:
    return OpsEvents(clock=clock, logger=logging.getLogger("test.ops"), **kw)


def spooled(id_: str, topic: str = "Orders", error: str = "connect to 127.0.0.1:20911 failed") -> RetryRecord:
    return RetryRecord(id=id_, topic=topic, body=b"secret body", last_error=error)


def test_json_lines_parse_with_stable_field_names() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    handler = configure("debug", "json", out)
    try:
        log = logging.getLogger("rocksidecar.test")
        log.warning(
            "broker isolated: %s", "broker-a", extra={"event": "broker_isolated", "broker": "broker-a"}
        )
        log.info('plain line with a "quote" and\nnewline', extra={"color_message": "\x1b[36mx\x1b[0m"})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed")
    finally:
        root.removeHandler(handler)
        for old in saved[0]:
            root.addHandler(old)
        root.setLevel(saved[1])
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # a newline or a traceback never splits a record over lines
    docs = [orjson.loads(line) for line in lines]
    assert list(docs[0])[:5] == ["ts", "level", "logger", "event", "message"]
    assert docs[0]["event"] == "broker_isolated" and docs[0]["broker"] == "broker-a"
    assert docs[0]["level"] == "warning" and docs[0]["ts"].endswith("Z")
    assert docs[1]["event"] == "log" and "newline" in docs[1]["message"]
    assert "color_message" not in docs[1]  # uvicorn's coloured duplicate is not a field
    assert "ValueError: boom" in docs[2]["exception"]


def test_text_lines_append_fields_as_key_value() -> None:
    record = logging.LogRecord("rocksidecar.events", logging.WARNING, "", 0, "spooled %s", ("M1",), None)
    record.event = "message_spooled"
    record.error = "connect failed"
    line = TextFormatter().format(record)
    assert line.endswith(
        'WARNING rocksidecar.events: spooled M1 event=message_spooled error="connect failed"'
    )


def test_configure_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="log format"):
        configure("info", "xml")


def test_throttle_allows_one_line_per_key_per_window() -> None:
    clock = FakeClock()
    throttle = Throttle(10.0, clock)
    assert throttle.allow(("a",)) == 0
    assert [throttle.allow(("a",)) for _ in range(5)] == [None] * 5
    assert throttle.allow(("b",)) == 0  # another cause is not held back
    clock.advance(10.0)
    assert throttle.expired() == [(("a",), 5)]  # "b" held nothing back: no summary
    assert throttle.allow(("a",)) == 0


def test_a_spool_storm_logs_once_per_cause_then_one_summary(capture: Capture) -> None:
    clock = FakeClock()
    ops = events(clock)
    for i in range(1000):  # the port and latency differ per message: still one cause
        ops.spooled(spooled(f"M{i}", error=f"connect to 127.0.0.1:{20000 + i % 7} failed after {i} ms"))
    ops.spooled(spooled("P1", topic="Payments"))
    lines = capture.events("message_spooled")
    assert len(lines) == 2
    first = lines[0]
    assert (first.id, first.topic, first.levelname) == ("M0", "Orders", "WARNING")
    assert first.error == "connect to 127.0.0.1:20000 failed after 0 ms"
    assert "secret body" not in first.getMessage() and "body" not in vars(first)
    ops.flush()
    assert len(capture.events("message_spooled")) == 2  # the window is not over yet
    clock.advance(10.0)
    ops.flush()
    [summary] = [r for r in capture.events("message_spooled") if getattr(r, "summary", False)]
    assert summary.suppressed == 999 and summary.topic == "Orders"
    ops.spooled(spooled("M-next"))  # a new window: logged again
    assert capture.events("message_spooled")[-1].id == "M-next"


def test_replays_are_summarised_per_window(capture: Capture) -> None:
    clock = FakeClock()
    ops = events(clock)
    for _ in range(700):
        ops.replayed("delivered")
    for _ in range(3):
        ops.replayed("rescheduled")
    ops.flush()
    assert capture.events("replayed") == []
    clock.advance(10.0)
    ops.flush()
    [line] = capture.events("replayed")
    assert line.outcomes == {"delivered": 700, "rescheduled": 3} and line.count == 703
    clock.advance(10.0)
    ops.flush()
    assert len(capture.events("replayed")) == 1  # nothing replayed since: no line


def test_dead_letters_and_late_delays(capture: Capture) -> None:
    clock = FakeClock()
    ops = events(clock, late_threshold_s=1.0)
    for i in range(50):
        record = RetryRecord(id=f"D{i}", topic="Orders", body=b"x", retry_count=10)
        ops.dead_lettered(DeadLetter(b"k", "retries exhausted after 10: SystemBusy", 1, b"", record))
    [dead] = capture.events("message_dead_lettered")
    assert (dead.id, dead.topic, dead.attempts, dead.levelname) == ("D0", "Orders", 10, "ERROR")
    ops.delay_published(0.5)  # within the threshold: silent
    assert capture.events("delay_late") == []
    for _ in range(20):
        ops.delay_published(2.5)
    [late] = capture.events("delay_late")
    assert late.lateness_s == 2.5 and late.threshold_s == 1.0


def test_broker_state_events(capture: Capture) -> None:
    clock = FakeClock()
    ops = events(clock)
    fault = LatencyFaultTolerance(clock=clock, on_change=ops.broker_state)
    for _ in range(20):  # a storm of failures while isolated: one line
        fault.update("broker-a", 0.01, isolation=True, unreachable=True, reason="connection refused")
    [isolated] = capture.events("broker_isolated")
    assert (isolated.broker, isolated.reason, isolated.backoff_s) == ("broker-a", "connection refused", 600.0)
    assert isolated.levelname == "WARNING"
    fault.mark_recovered("broker-a")
    fault.mark_recovered("broker-a")  # already available: nothing more
    [recovered] = capture.events("broker_recovered")
    assert recovered.reason == "answered the recovery probe"
    fault.update("broker-a", 0.01, isolation=True, reason="SYSTEM_BUSY")
    fault.update("broker-a", 0.005, isolation=False)  # a send succeeded
    assert [r.reason for r in capture.events("broker_recovered")][-1] == "a send succeeded"
    fault.update("broker-b", 0.6, isolation=False)  # slow: 600 ms maps to 30 s of back-off
    [slow] = capture.events("broker_backoff")
    assert slow.backoff_s == 30.0 and slow.levelname == "INFO"
    fault.update("broker-b", 0.6, isolation=False)
    assert len(capture.events("broker_backoff")) == 1


def test_route_events(capture: Capture) -> None:
    ops = events(FakeClock())
    ops.route_changed("Orders", None, ("broker-a", "broker-b"))
    ops.route_changed("Orders", ("broker-a", "broker-b"), ("broker-b",))
    [appeared] = capture.events("route_appeared")
    [changed] = capture.events("route_changed")
    assert appeared.brokers == ["broker-a", "broker-b"] and appeared.brokers_before is None
    assert changed.brokers == ["broker-b"] and changed.brokers_before == ["broker-a", "broker-b"]


def test_configuration_is_logged_without_secrets() -> None:
    settings = Settings(
        namesrv=("10.0.0.1:9876",),
        access_key="AK",
        secret_key="very-secret",
        auth_token="tok3n",
        dead_letter_webhook="https://user:pw@hooks.example:8443/dead?sig=abc",
    )
    doc = redacted(settings)
    text = orjson.dumps(doc).decode()
    for secret in ("very-secret", "tok3n", "pw", "sig=abc", "user:"):
        assert secret not in text
    assert doc["secret_key"] == "<redacted>" and doc["namesrv"] == ["10.0.0.1:9876"]
    assert doc["dead_letter_webhook"] == "https://<redacted>@hooks.example:8443/dead?<redacted>"
    assert redacted(Settings())["auth_token"] == ""  # unset stays visibly unset


def test_cause_ignores_numbers() -> None:
    assert cause("timeout after 3001 ms on 10.0.0.1:10911") == cause("timeout after 12 ms on 10.0.0.2:10912")


FORGED = "x\n2099-01-01 00:00:00,000 ERROR rocksidecar.events: FORGED broker=evil"


def test_a_broker_error_text_in_a_message_stays_on_its_line() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("test.ops.text")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        OpsEvents(clock=FakeClock(), logger=logger).spooled(spooled("M1", error="CODE_1: " + FORGED))
    finally:
        logger.removeHandler(handler)
    [line] = out.getvalue().splitlines()
    assert "spooled for retry: CODE_1: x\\n2099-01-01 00:00:00,000 ERROR" in line  # escaped, readable
    assert 'error="CODE_1: x\\n2099-01-01 00:00:00,000 ERROR rocksidecar.events: FORGED broker=evil"' in line


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("boom\n2099-01-01T00:00:00Z\tERROR\tforged=1", '"boom\\n2099-01-01T00:00:00Z\\tERROR\\tforged=1"'),
        ("a\rb", '"a\\rb"'),
        ("nul\x00esc\x1b[31m", '"nul\\u0000esc\\u001b[31m"'),  # a terminal's escape sequence too
        ("del\x7fnel\x85", '"del\\x7fnel\\x85"'),  # what JSON leaves raw: DEL and C1 (NEL breaks lines)
        ("ls\u2028ps\u2029", '"ls\\u2028ps\\u2029"'),  # Unicode's line and paragraph separators
    ],
)
def test_a_field_value_is_quoted_and_escaped_when_it_holds_a_control_character(
    value: str, shown: str
) -> None:
    record = logging.LogRecord("rocksidecar.events", logging.WARNING, "", 0, "spooled", (), None)
    record.event = "message_spooled"
    record.broker = value
    line = TextFormatter().format(record)
    assert line.endswith(f" event=message_spooled broker={shown}"), line
    assert len(line.splitlines()) == 1


def test_a_message_s_control_characters_are_escaped() -> None:
    record = logging.LogRecord("x", logging.INFO, "", 0, "route of %s: %s", ("t\u2028", "a\r\n\tb\x9b"), None)
    line = TextFormatter().format(record)
    assert line.endswith(" INFO x: route of t\\u2028: a\\r\\n\\tb\\x9b"), line


def test_a_traceback_keeps_its_lines_each_indented_below_the_record() -> None:
    try:
        raise ValueError("refused\n2099-01-01 00:00:00,000 ERROR rocksidecar.events: FORGED")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, "", 0, "failed", (), sys.exc_info())
    record.event = "boom"
    head, *trace = TextFormatter().format(record).split("\n")
    assert head.endswith(" ERROR x: failed event=boom")
    assert trace[0] == "  Traceback (most recent call last):" and trace[-1].startswith("  2099-01-01")
    assert all(line.startswith("  ") for line in trace)  # only a record's first line starts at the margin


def test_causes_past_the_cap_share_one_key(capture: Capture) -> None:
    """Topics are the client's choice: a storm over distinct topics wrote a line and held an entry per
    topic for the window. Past MAX_CAUSES causes, the new ones share one, summarised with their count."""
    clock = FakeClock()
    ops = events(clock)
    for i in range(3 * MAX_CAUSES):
        ops.spooled(spooled(f"M{i}", topic=f"t{i:x}"))
    lines = capture.events("message_spooled")
    assert len(lines) == MAX_CAUSES + 1 and len(ops._throttle) == len(ops._keys) == MAX_CAUSES + 1
    assert lines[-1].cause == "(too many causes)" and lines[-1].topic == f"t{MAX_CAUSES:x}"
    ops.spooled(spooled("again", topic="t0"))  # a cause held already keeps its own key
    assert len(capture.events("message_spooled")) == MAX_CAUSES + 1
    clock.advance(10.0)
    ops.flush()
    summaries = [r for r in capture.events("message_spooled") if getattr(r, "summary", False)]
    assert [(r.suppressed, getattr(r, "topic", None)) for r in summaries] == [
        (1, "t0"),
        (2 * MAX_CAUSES - 1, None),
    ]
    assert summaries[1].cause == "(too many causes)" and "other causes" in summaries[1].getMessage()
    assert len(ops._throttle) == len(ops._keys) == 0
