"""The devbroker name server: standard-JSON routes, TOPIC_NOT_EXIST, cluster info, topic list, unknown
codes, binary headers, brokers leaving and rejoining routes, and REGISTER_BROKER over the wire."""

from __future__ import annotations

import zlib

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode, ResponseCode, SerializeType
from rocksidecar.rmq.connection import connect
from rocksidecar.rmq.errors import ConnectError
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import TopicRouteData


async def route_raw(client: RemotingClient, cluster: DevCluster, topic: str) -> RemotingCommand:
    cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return await client.invoke(cluster.namesrv_addr, cmd, 3.0)


async def test_template_route_is_standard_json_with_master_key_0(
    cluster: DevCluster, client: RemotingClient
) -> None:
    resp = await route_raw(client, cluster, "TBW102")
    assert resp.code == ResponseCode.SUCCESS
    doc = orjson.loads(resp.body)  # strict JSON: the keys are quoted
    a, b = cluster.brokers["broker-a"], cluster.brokers["broker-b"]
    assert [d["brokerAddrs"] for d in doc["brokerDatas"]] == [{"0": a.addr}, {"0": b.addr}]
    assert {(q["brokerName"], q["perm"], q["writeQueueNums"]) for q in doc["queueDatas"]} == {
        ("broker-a", 7, 4),
        ("broker-b", 7, 4),
    }


async def test_unknown_topic_is_topic_not_exist(cluster: DevCluster, client: RemotingClient) -> None:
    resp = await route_raw(client, cluster, "Nobody")
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert resp.remark == "No topic route info in name server for the topic: Nobody"


async def test_binary_header_request_is_answered_in_binary(cluster: DevCluster) -> None:
    conn = await connect(cluster.namesrv_addr, 1.0)
    cmd = RemotingCommand(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, serialize_type=SerializeType.ROCKETMQ
    )
    resp = await conn.invoke(cmd, 3.0)
    assert resp.serialize_type is SerializeType.ROCKETMQ and resp.code == ResponseCode.SUCCESS
    conn.close()


async def test_cluster_info_topic_list_and_unknown_codes(cluster: DevCluster, client: RemotingClient) -> None:
    ns = NameServerClient(client, cluster.namesrv_addr)
    info = await ns.get_cluster_info()
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": cluster.brokers["broker-b"].addr}  # type: ignore[index]
    cluster.brokers["broker-b"].topics.ensure("OnlyOnB", 2)
    assert await ns.get_all_topics() == ["OnlyOnB", "TBW102"]
    resp = await client.invoke(cluster.namesrv_addr, RemotingCommand(RequestCode.PULL_MESSAGE), 3.0)
    assert (resp.code, resp.remark) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        " request type 11 not supported",
    )


async def test_stopped_broker_leaves_routes_and_comes_back(
    cluster: DevCluster, client: RemotingClient
) -> None:
    ns = NameServerClient(client, cluster.namesrv_addr)
    b = cluster.brokers["broker-b"]
    addr = b.addr
    await b.stop()
    assert [d.broker_name for d in (await ns.get_route("TBW102")).broker_datas] == ["broker-a"]
    with pytest.raises(ConnectError):
        await client.invoke(addr, RemotingCommand(RequestCode.HEART_BEAT), 1.0)
    await b.start()
    route = await ns.get_route("TBW102")
    assert route.master_addr("broker-b") == addr == b.addr


def register_cmd(
    topics: dict[str, object], *, broker_id: str = "0", crc: int | None = None
) -> RemotingCommand:
    body = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": topics}})
    header = {
        "brokerName": "remote-x",
        "brokerAddr": "10.1.2.3:10911",
        "clusterName": "Remote",
        "haServerAddr": "10.1.2.3:10912",
        "brokerId": broker_id,
        "compressed": "false",
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc),
    }
    return RemotingCommand(RequestCode.REGISTER_BROKER, header, body)


async def test_register_broker_over_the_wire_until_its_connection_closes(cluster: DevCluster) -> None:
    topic = {"topicName": "RemoteT", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
    conn = await connect(cluster.namesrv_addr, 1.0)
    assert (await conn.invoke(register_cmd({"RemoteT": topic}), 3.0)).code == ResponseCode.SUCCESS
    route = cluster.namesrv.route("RemoteT")
    assert route is not None and route.master_addr("remote-x") == "10.1.2.3:10911"
    assert isinstance(route, TopicRouteData) and route.queue_datas[0].write_queue_nums == 2
    (server_side,) = cluster.namesrv.listener.connections
    conn.close()
    await server_side.closed_event.wait()
    assert cluster.namesrv.route("RemoteT") is None


async def test_register_broker_rejects_slaves_and_bad_crc(
    cluster: DevCluster, client: RemotingClient
) -> None:
    slave = await client.invoke(cluster.namesrv_addr, register_cmd({}, broker_id="1"), 3.0)
    bad_crc = await client.invoke(cluster.namesrv_addr, register_cmd({}, crc=12345), 3.0)
    assert (slave.code, bad_crc.code) == (ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_ERROR)
    assert bad_crc.remark == "crc32 not match"
    unregister = RemotingCommand(RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a"})
    assert (await client.invoke(cluster.namesrv_addr, unregister, 3.0)).code == ResponseCode.SUCCESS
    assert cluster.namesrv.route("TBW102") is not None  # in-process brokers leave only by stopping
