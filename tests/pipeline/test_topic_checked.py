"""The Spark sink's `topic` option is checked on the driver as the sidecar's send path checks a topic
(rmq.message.validate_topic, then no consumer group's retry topic: app.request.check_send_topic), so a
topic the sidecar refuses fails save() naming the option instead of running every task to have each row
REJECTED. The read source's topics are names of topics to read, which may be retry, dead-letter and system
topics: only the name rule applies there."""

from __future__ import annotations

import pytest

from rocksidecar.pipeline import read_options
from rocksidecar.pipeline.options import OptionError, parse
from rocksidecar.rmq import InvalidMessageError
from rocksidecar.rmq.codes import DEFAULT_TOPIC
from rocksidecar.rmq.consumer.config import DLQ_PREFIX
from rocksidecar.rmq.message import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    TOPIC_MAX_LEN,
    validate_topic,
)


@pytest.mark.parametrize("topic", ["TBW102", "SCHEDULE_TOPIC_XXXX", "rmq_sys_audit", "%RETRY%orders-app"])
def test_spark_sink_checks_the_topic_like_the_sidecar(topic: str) -> None:
    """README, the Spark sink's options: "`topic` | required | the topic, checked like the sidecar checks
    it", and "The driver checks the options ... before any task runs. A typo fails `save()` with an error
    naming the option." The sidecar refuses these topics (400, `field: topic`); the driver must too,
    instead of running every task and having each row REJECTED."""
    with pytest.raises(OptionError, match="topic"):
        parse({"topic": topic})


def _sidecar_sends_to(topic: str) -> bool:
    """app.request.check_send_topic's rule (the sink may not import app; this test may not either, for
    app's settings): rmq's validate_topic, then no retry topic."""
    try:
        validate_topic(topic)
    except InvalidMessageError:
        return False
    return not topic.startswith(RETRY_PREFIX)


@pytest.mark.parametrize(
    "topic",
    [
        "Orders",
        "a|b%c-d_e",
        "x" * TOPIC_MAX_LEN,
        "x" * (TOPIC_MAX_LEN + 1),
        "",
        "Orders\n",  # TOPIC.match with "$" took a final newline; the sidecar's fullmatch does not
        "Or ders",
        DEFAULT_TOPIC,
        *sorted(NOT_ALLOWED_SEND_TOPICS),
        f"{SYSTEM_TOPIC_PREFIX}x",
        "RMQ_SYS_TRACE_TOPIC",  # Java's rule is case-sensitive: the prefix is lower case
        f"{RETRY_PREFIX}g",
        f"{DLQ_PREFIX}g",  # the sidecar sends to a dead-letter topic (a replay of dead letters)
    ],
)
def test_the_sink_refuses_exactly_what_the_sidecar_refuses(topic: str) -> None:
    """The sink takes rmq's topic rule and refuses the retry topics as the sidecar's send path does."""
    if _sidecar_sends_to(topic):
        assert parse({"topic": topic}).topic == topic
    else:
        with pytest.raises(OptionError, match="option topic"):
            parse({"topic": topic})


@pytest.mark.parametrize(
    "topic", [f"{RETRY_PREFIX}orders-app", f"{DLQ_PREFIX}orders-app", "SCHEDULE_TOPIC_XXXX", "rmq_sys_audit"]
)
def test_the_source_reads_retry_dead_letter_and_system_topics(topic: str) -> None:
    """Reading is not sending: a group's retry and dead-letter topics (to inspect or replay what failed),
    the delay levels' SCHEDULE_TOPIC_XXXX and the brokers' rmq_sys_* topics are topics like others to a
    pull, which the sidecar's send rules do not govern."""
    opts = read_options.parse({"namesrv": "127.0.0.1:9876", "topic": topic}, streaming=False)
    assert opts.topics == (topic,)


@pytest.mark.parametrize("topic", ["Or ders", "x" * (TOPIC_MAX_LEN + 1), "a/b"])
def test_the_source_still_refuses_what_is_no_topic_name(topic: str) -> None:
    with pytest.raises(OptionError, match="option topic"):
        read_options.parse({"namesrv": "127.0.0.1:9876", "topic": topic}, streaming=False)
