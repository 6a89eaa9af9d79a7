"""Route JSON (standard and fastjson's legacy form) and the queue lists derived from it."""

from __future__ import annotations

import orjson
import pytest

from rocksidecar.rmq.codes import PERM_READ, ResponseCode
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import (
    MAX_QUEUE_NUMS,
    MAX_ROUTE_BROKERS,
    MAX_ROUTE_JSON_BYTES,
    MAX_ROUTE_QUEUES,
    TopicRouteData,
    parse_lenient_json,
)
from tests.fakes import ScriptedInvoker

LEGACY = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.9:10911",1:"10.0.0.10:10911"},"brokerName":"broker-b",'
    b'"cluster":"DefaultCluster"},{"brokerAddrs":{1:"10.0.0.11:10911"},"brokerName":"broker-c",'
    b'"cluster":"C"},{"brokerAddrs":{0:"10.0.0.8:10911"},"brokerName":"broker-a","cluster":"C"}],'
    b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-b","perm":6,"readQueueNums":2,'
    b'"topicSynFlag":0,"writeQueueNums":2},{"brokerName":"broker-a","perm":6,"readQueueNums":3,'
    b'"topicSysFlag":0,"writeQueueNums":1},{"brokerName":"broker-c","perm":6,"readQueueNums":1,'
    b'"topicSysFlag":0,"writeQueueNums":1}]}'
)


def test_legacy_integer_keys_are_parsed() -> None:
    route = TopicRouteData.from_json(LEGACY)
    assert route.master_addr("broker-b") == "10.0.0.9:10911"
    assert route.broker("broker-b").broker_addrs == {0: "10.0.0.9:10911", 1: "10.0.0.10:10911"}  # type: ignore[union-attr]


def test_lenient_parser_leaves_string_contents_alone() -> None:
    doc = parse_lenient_json(b'{"a":"{1:2, 3:4}",5:{"x":",6:"}}')
    assert doc == {"a": "{1:2, 3:4}", "5": {"x": ",6:"}}


def test_publish_queues_sorted_by_broker_skip_masterless_and_unwritable() -> None:
    route = TopicRouteData.from_json(LEGACY)
    assert route.publish_queues("T") == [
        MessageQueue("T", "broker-a", 0),
        MessageQueue("T", "broker-b", 0),
        MessageQueue("T", "broker-b", 1),
    ]
    assert len(route.subscribe_queues("T")) == 6


def test_read_only_queue_data_is_not_writable() -> None:
    doc = LEGACY.replace(b'"perm":6,"readQueueNums":3', b'"perm":4,"readQueueNums":3')
    assert [q.broker_name for q in TopicRouteData.from_json(doc).publish_queues("T")] == ["broker-b"] * 2


def test_ordered_topic_conf_wins() -> None:
    route = TopicRouteData((), (), "broker-x:2;broker-y:1")
    assert route.publish_queues("T") == [
        MessageQueue("T", "broker-x", 0),
        MessageQueue("T", "broker-x", 1),
        MessageQueue("T", "broker-y", 0),
    ]


def test_standard_json_round_trip_and_clamp() -> None:
    route = TopicRouteData.from_json(LEGACY)
    again = TopicRouteData.from_json(route.to_json())
    assert again == route
    assert max(q.write_queue_nums for q in route.clamp_queues(1).queue_datas) == 1


# A name server's route is checked before any queue is built from it --------------------------------
def _doc(**queue: object) -> dict[str, object]:
    q = {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "writeQueueNums": 4, **queue}
    return {
        "brokerDatas": [{"brokerAddrs": {"0": "10.0.0.8:10911"}, "brokerName": "broker-a", "cluster": "C"}],
        "queueDatas": [q],
    }


def _refused(doc: object, match: str) -> None:
    with pytest.raises(FrameError, match=match):
        TopicRouteData.from_json(orjson.dumps(doc))


def test_queue_nums_past_the_bound_refuse_the_route() -> None:
    # Before: TopicRouteData took 2**31-1, and publish_queues built as many MessageQueue objects (Java
    # does too) - the process ran out of memory.
    _refused(_doc(writeQueueNums=2**31 - 1), "writeQueueNums")
    _refused(_doc(readQueueNums=MAX_QUEUE_NUMS + 1), "readQueueNums")
    ok = TopicRouteData.from_json(orjson.dumps(_doc(writeQueueNums=MAX_QUEUE_NUMS)))
    assert len(ok.publish_queues("T")) == MAX_QUEUE_NUMS


def test_negative_or_non_integer_numbers_refuse_the_route() -> None:
    _refused(_doc(writeQueueNums=-1), "writeQueueNums")
    _refused(_doc(readQueueNums="many"), "readQueueNums")
    _refused(_doc(perm=None), "perm")
    _refused(_doc(readQueueNums=True), "readQueueNums")
    _refused(_doc(topicSysFlag=1e300), "topicSysFlag")
    assert TopicRouteData.from_json(orjson.dumps(_doc(readQueueNums="3"))).queue_datas[0].read_queue_nums == 3


def test_the_queues_of_all_brokers_together_are_bounded() -> None:
    doc = _doc()
    doc["queueDatas"] = [
        {"brokerName": f"b{i}", "perm": 6, "readQueueNums": MAX_QUEUE_NUMS, "writeQueueNums": 1}
        for i in range(MAX_ROUTE_QUEUES // MAX_QUEUE_NUMS + 1)
    ]
    _refused(doc, "queues")


def test_thousands_of_brokers_refuse_the_route() -> None:
    doc = _doc()
    doc["brokerDatas"] = [
        {"brokerAddrs": {"0": f"10.0.{i // 250}.{i % 250}:10911"}, "brokerName": f"b{i}"}
        for i in range(MAX_ROUTE_BROKERS + 1)
    ]
    _refused(doc, "brokerDatas")


def test_an_order_topic_conf_of_2_31_queues_refuses_the_route() -> None:
    # Before: publish_queues built range(int(count)) queues, as Java's topicRouteData2TopicPublishInfo.
    doc = {**_doc(), "orderTopicConf": "broker-a:2147483647"}
    _refused(doc, "orderTopicConf")
    _refused({**_doc(), "orderTopicConf": {"broker-a": 4}}, "orderTopicConf")


@pytest.mark.parametrize(
    "addr",
    [
        "10.0.0.8",
        "10.0.0.8:99999",
        "10.0.0.8:-1",
        ":10911",
        "",
        10911,
        None,
        # Before: ValueError ('²' is a digit to str.isdigit, not to int(); int() refuses 4300+ digits),
        # or, Arabic-Indic digits, taken as port 10.
        "10.0.0.8:\u00b2",
        "10.0.0.8:\u0661\u0660",
        "10.0.0.8:" + "1" * 5000,
    ],
)
def test_a_broker_address_that_is_not_host_port_refuses_the_route(addr: object) -> None:
    doc = _doc()
    doc["brokerDatas"] = [{"brokerAddrs": {"0": addr}, "brokerName": "broker-a"}]
    _refused(doc, "not host:port")


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ([1, 2], "not a JSON object"),
        ({"queueDatas": {"brokerName": "a"}}, "queueDatas"),
        ({"queueDatas": ["a"]}, "queueDatas"),
        ({"queueDatas": [{"perm": 6}]}, "brokerName"),
        ({"brokerDatas": [{"brokerName": "a", "brokerAddrs": ["10.0.0.1:1"]}]}, "brokerAddrs"),
        ({"brokerDatas": [{"brokerName": "a", "brokerAddrs": {"master": "10.0.0.1:1"}}]}, "broker id"),
        ({"brokerDatas": [{"brokerName": "a", "cluster": 7}]}, "cluster"),
        ({"brokerDatas": [{"brokerName": "a", "brokerAddrs": {"1" * 5000: "10.0.0.1:1"}}]}, "broker id"),
        ({"queueDatas": [{"brokerName": "a", "perm": "6" * 5000}]}, "perm"),
    ],
)
def test_a_route_of_the_wrong_shape_is_a_frame_error(doc: object, match: str) -> None:
    # Before: KeyError, AttributeError, TypeError or ValueError, which the callers' RocketMQError
    # handlers let through.
    _refused(doc, match)


def test_unknown_perm_bits_are_ignored_as_java_does() -> None:
    route = TopicRouteData.from_json(orjson.dumps(_doc(perm=0x7FFF0000 | PERM_READ)))
    assert route.publish_queues("T") == [] and len(route.subscribe_queues("T")) == 4


def test_an_order_topic_conf_count_of_non_ascii_digits_is_skipped_as_malformed() -> None:
    # Before: '²' passed str.isdigit and the route was refused, unlike any other malformed item.
    route = TopicRouteData.from_json(orjson.dumps({**_doc(), "orderTopicConf": "broker-a:\u00b2;broker-b:1"}))
    assert route.publish_queues("T") == [MessageQueue("T", "broker-b", 0)]


@pytest.mark.parametrize("body", [b"\xff{}", b'{"queueDatas":[],"x":"\xe9"}', b"{0:\xff}"])
def test_a_route_that_is_not_utf8_is_a_frame_error(body: bytes) -> None:
    # Before: orjson refused it, and the fallback for fastjson's bare keys raised UnicodeDecodeError.
    with pytest.raises(FrameError, match="not UTF-8"):
        TopicRouteData.from_json(body)
    with pytest.raises(FrameError, match="not UTF-8"):
        parse_lenient_json(body)


async def test_cluster_info_that_is_not_utf8_is_a_frame_error_naming_the_name_server() -> None:
    async def answer(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=b"{0:\xff}")

    ns = NameServerClient(ScriptedInvoker(answer), "127.0.0.1:9876")
    with pytest.raises(FrameError, match=r"cluster info from 127\.0\.0\.1:9876 refused: .*not UTF-8") as info:
        await ns.get_cluster_info()
    assert info.value.addr == "127.0.0.1:9876"


def test_json_too_deep_or_too_big_is_refused() -> None:
    with pytest.raises(FrameError):
        TopicRouteData.from_json(b'{"queueDatas":' + b"[" * 3000 + b"]" * 3000 + b"}")
    with pytest.raises(FrameError, match="bytes"):
        TopicRouteData.from_json(b" " * (MAX_ROUTE_JSON_BYTES + 1))


async def test_the_name_server_logs_and_raises_a_refused_route(caplog: pytest.LogCaptureFixture) -> None:
    async def answer(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(_doc(writeQueueNums=2**31 - 1)))

    ns = NameServerClient(ScriptedInvoker(answer), "127.0.0.1:9876")
    with pytest.raises(FrameError, match=r"route of .T. from 127\.0\.0\.1:9876 refused"):
        await ns.get_route("T")
    assert "route of T from name server 127.0.0.1:9876 refused" in caplog.text
