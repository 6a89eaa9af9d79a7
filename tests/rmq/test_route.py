"""Route JSON (standard and fastjson's legacy form) and the queue lists derived from it."""

from __future__ import annotations

from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.route import TopicRouteData, parse_lenient_json

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
