"""fastjson's MessageQueue-keyed maps (rmq.consumer.queue_tables): written as fastjson writes them, read
back, and any other bytes refused with FrameError only."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.rmq.consumer import queue_tables
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.protocol.numbers import INT64_MAX

NAMES = st.from_regex(r"[%|a-zA-Z0-9_-]{1,20}", fullmatch=True)  # Java's topic and broker name rule
QUEUES = st.builds(MessageQueue, NAMES, NAMES, st.integers(0, 1023))


@given(st.dictionaries(QUEUES, st.integers(0, INT64_MAX), max_size=30))
def test_a_table_written_reads_back(table: dict[MessageQueue, int]) -> None:
    body = b'{"offsetTable":' + queue_tables.table_json(table) + b"}"
    assert queue_tables.offsets(queue_tables.loads(body, "t")["offsetTable"], "t") == table


def test_it_reads_what_a_java_broker_writes() -> None:
    # Broker2Client.resetOffset's body for two queues, as 4.9.4 wrote it (a HashMap: any order)
    body = (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"TopicTest"}:12,'
        b'{"brokerName":"broker-a","queueId":0,"topic":"TopicTest"}:0}}'
    )
    table = queue_tables.offsets(queue_tables.loads(body, "t")["offsetTable"], "t")
    assert table == {
        MessageQueue("TopicTest", "broker-a", 1): 12,
        MessageQueue("TopicTest", "broker-a", 0): 0,
    }


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_other_bytes_are_a_frame_error_or_a_table(body: bytes) -> None:
    try:
        doc = queue_tables.loads(body, "t")
        table = queue_tables.offsets(doc.get("offsetTable") if isinstance(doc, dict) else doc, "t")
    except FrameError:
        return
    assert all(type(mq) is MessageQueue and 0 <= o <= INT64_MAX for mq, o in table.items())


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
        max_leaves=20,
    )
)
def test_any_json_as_a_table_is_a_frame_error_or_a_table(doc: object) -> None:
    try:
        table = queue_tables.offsets(doc, "t")
    except FrameError:
        return
    assert all(type(mq) is MessageQueue and type(o) is int for mq, o in table.items())


def test_a_table_too_large_for_any_route_is_refused() -> None:
    table = [{"topic": "T", "brokerName": "b", "queueId": q, "offset": 0} for q in range(20_000)]
    with pytest.raises(FrameError, match="more than a route holds"):
        queue_tables.offsets(orjson.loads(orjson.dumps(table)), "t")
