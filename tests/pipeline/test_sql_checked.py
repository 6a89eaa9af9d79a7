"""The read source's `sql` option is checked by the brokers (CHECK_CLIENT_CONFIG, as the sidecar's consumer
checks its SQL92 subscription at start) on the driver, before any pull. RocketMQ 4.9.4 serves a pull whose
expression does not compile unfiltered (ConsumerFilterManager.build returns null and the filter takes every
message): a typo in `sql` would read the whole topic."""

from __future__ import annotations

import pytest

from bench.common import DevbrokerProcess
from rocksidecar.pipeline import broker_read, read_options
from rocksidecar.pipeline.options import OptionError
from rocksidecar.pipeline.source import BatchReader, StreamReader
from tests.pipeline.source_topics import Put, create, put

pytestmark = pytest.mark.timeout(120)

BAD = "n >>= 25"  # does not parse


@pytest.fixture
def no_pulls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Fails any pull, so that a test passes whatever a broker does with a bad expression on a pull."""
    pulled: list[object] = []

    async def pull(*args: object, **kwargs: object) -> None:
        pulled.append(args)
        raise AssertionError("a pull was made")

    monkeypatch.setattr(broker_read.BrokerApi, "pull", pull)
    return pulled


def _options(devbroker: DevbrokerProcess, topic: str, sql: str, streaming: bool) -> read_options.ReadOptions:
    raw = {"namesrv": devbroker.namesrv, "topic": topic, "sql": sql}
    return read_options.parse(raw, streaming=streaming)


def test_a_batch_read_with_sql_that_does_not_parse_is_refused_before_any_pull(
    devbroker: DevbrokerProcess, topic: str, no_pulls: list[object]
) -> None:
    create(devbroker, topic, 1)
    put(devbroker, topic, [Put("broker-a", 0, b"m", properties=(("n", "1"),))])
    with pytest.raises(OptionError, match=r"option sql='n >>= 25'.*broker-[ab]"):
        BatchReader(_options(devbroker, topic, BAD, streaming=False))
    assert no_pulls == []


def test_a_stream_with_sql_that_does_not_parse_is_refused_before_any_pull(
    devbroker: DevbrokerProcess, topic: str, no_pulls: list[object]
) -> None:
    create(devbroker, topic, 1)
    with pytest.raises(OptionError, match=r"option sql='n >>= 25'"):
        StreamReader(_options(devbroker, topic, BAD, streaming=True))
    assert no_pulls == []


def test_sql_that_parses_plans_as_before(devbroker: DevbrokerProcess, topic: str) -> None:
    create(devbroker, topic, 1)
    put(devbroker, topic, [Put("broker-a", 0, b"m", properties=(("n", "1"),))])
    reader = BatchReader(_options(devbroker, topic, "n >= 1", streaming=False))
    assert [r.queue.broker for r in reader.ranges] == ["broker-a"]  # broker-b's queue holds nothing
    StreamReader(_options(devbroker, topic, "n >= 1", streaming=True))
