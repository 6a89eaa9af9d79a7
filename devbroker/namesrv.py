"""The devbroker name server: routes built from the topic tables of the brokers registered with it
(in memory by brokers of the same process, or over the wire with REGISTER_BROKER), cluster info and
the topic list. A broker that stops, or whose registering connection closes, leaves every route."""

from __future__ import annotations

import ssl
import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from rocksidecar.rmq.codes import MASTER_ID, RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData, parse_lenient_json

from . import headers
from .headers import Reject
from .listener import LOOPBACK, Listener
from .topics import TopicConfig, TopicTable


@dataclass(frozen=True, slots=True)
class Registration:
    """A broker as the name server knows it (REGISTER_BROKER, or in-process)."""

    broker_name: str
    addr: str
    cluster: str
    topics: TopicTable  # a live view for in-process brokers, a snapshot for wire registrations
    conn: Connection | None = None  # the connection that registered it, if over the wire


DEFAULT_CLUSTER = "DefaultCluster"


class NameServer:
    def __init__(self, *, port: int = 0, host: str = LOOPBACK, tls: ssl.SSLContext | None = None) -> None:
        self._brokers: dict[str, Registration] = {}
        self.listener = Listener(
            self._handle, port=port, host=host, on_close=self._connection_closed, tls=tls
        )

    @property
    def addr(self) -> str:
        return self.listener.addr

    async def start(self) -> None:
        await self.listener.start()

    async def stop(self) -> None:
        await self.listener.stop()

    def register(self, reg: Registration) -> None:
        self._brokers[reg.broker_name] = reg

    def unregister(self, broker_name: str) -> None:
        self._brokers.pop(broker_name, None)

    def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route over every registered broker that has it, or None."""
        queues: list[QueueData] = []
        brokers: list[BrokerData] = []
        for reg in sorted(self._brokers.values(), key=lambda r: r.broker_name):
            cfg = reg.topics.get(topic)
            if cfg is None:
                continue
            queues.append(
                QueueData(
                    reg.broker_name, cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm, cfg.topic_sys_flag
                )
            )
            brokers.append(BrokerData(reg.cluster, reg.broker_name, {MASTER_ID: reg.addr}))
        return TopicRouteData(tuple(queues), tuple(brokers)) if queues else None

    def cluster_info(self) -> dict[str, Any]:
        clusters: dict[str, list[str]] = {}
        table = {}
        for reg in sorted(self._brokers.values(), key=lambda r: r.broker_name):
            clusters.setdefault(reg.cluster, []).append(reg.broker_name)
            table[reg.broker_name] = {
                "brokerAddrs": {str(MASTER_ID): reg.addr},
                "brokerName": reg.broker_name,
                "cluster": reg.cluster,
            }
        return {"brokerAddrTable": table, "clusterAddrTable": clusters}

    def topics(self) -> list[str]:
        return sorted({name for reg in self._brokers.values() for name in reg.topics.names()})

    # requests -----------------------------------------------------------------------------------
    async def _handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return self._answer(conn, cmd)
        except Reject as exc:
            return cmd.response(exc.code, exc.remark)

    def _answer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        code = cmd.code
        if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = headers.text(cmd.ext_fields, "topic")
            route = self.route(topic)
            if route is None:
                raise Reject(
                    ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
                )
            return cmd.response(ResponseCode.SUCCESS, body=route.to_json())
        if code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(self.cluster_info()))
        if code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": self.topics()}))
        if code == RequestCode.REGISTER_BROKER:
            self.register(_wire_registration(conn, cmd))
            return cmd.response(ResponseCode.SUCCESS)
        if code == RequestCode.UNREGISTER_BROKER:
            reg = self._brokers.get(headers.text(cmd.ext_fields, "brokerName"))
            if reg is not None and reg.conn is not None:  # in-process brokers stop themselves
                self.unregister(reg.broker_name)
            return cmd.response(ResponseCode.SUCCESS)
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {code} not supported")

    def _connection_closed(self, conn: Connection) -> None:
        for reg in list(self._brokers.values()):
            if reg.conn is conn:
                self.unregister(reg.broker_name)


def _wire_registration(conn: Connection, cmd: RemotingCommand) -> Registration:
    """REGISTER_BROKER from another process: masters only, uncompressed JSON body (§4.6)."""
    ext = cmd.ext_fields
    if headers.integer(ext, "brokerId") != MASTER_ID:
        raise Reject(ResponseCode.SYSTEM_ERROR, "the devbroker name server keeps masters (brokerId 0) only")
    if headers.boolean(ext, "compressed"):
        raise Reject(ResponseCode.SYSTEM_ERROR, "compressed registrations are not supported; send JSON")
    crc = headers.integer(ext, "bodyCrc32", 0)
    if crc and crc != zlib.crc32(cmd.body) & 0x7FFFFFFF:
        raise Reject(ResponseCode.SYSTEM_ERROR, "crc32 not match")
    try:
        doc = parse_lenient_json(cmd.body) if cmd.body else {}
        table = ((doc.get("topicConfigSerializeWrapper") or {}).get("topicConfigTable")) or {}
        topics = TopicTable(queues=1, auto_create=False)
        for name, t in table.items():
            read, write = int(t.get("readQueueNums", 0)), int(t.get("writeQueueNums", 0))
            perm, sys_flag = int(t.get("perm", 6)), int(t.get("topicSysFlag", 0))
            topics.put(TopicConfig(name, read, write, perm, sys_flag, bool(t.get("order", False))))
    except (AttributeError, TypeError, ValueError, FrameError) as exc:
        raise Reject(ResponseCode.SYSTEM_ERROR, f"undecodable registration body: {exc}") from None
    return Registration(
        broker_name=headers.text(ext, "brokerName"),
        addr=headers.text(ext, "brokerAddr"),
        cluster=headers.text(ext, "clusterName"),
        topics=topics,
        conn=conn,
    )
