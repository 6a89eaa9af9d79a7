"""Topic routes from the name server, and the queue lists derived from them. Pure: no I/O.

Name servers before 4.9.4 (and every GET_BROKER_CLUSTER_INFO in 4.x) write fastjson's integer map keys
unquoted, ``{0:"10.0.0.9:10911"}``; ``parse_lenient_json`` quotes them outside string literals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from .codes import MASTER_ID, PERM_READ, PERM_WRITE
from .errors import FrameError
from .message import MessageQueue

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BARE_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def parse_lenient_json(data: bytes | str) -> Any:
    """json.loads that also accepts fastjson's unquoted integer keys."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    text = data.decode() if isinstance(data, bytes) else data
    out: list[str] = []
    pos = 0
    for m in _STRING.finditer(text):
        out.append(_BARE_KEY.sub(r'\1"\2"\3', text[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_BARE_KEY.sub(r'\1"\2"\3', text[pos:]))
    try:
        return orjson.loads("".join(out))
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"undecodable route JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker name's addresses by broker id (0 is the master)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, data: bytes | str) -> TopicRouteData:
        doc = parse_lenient_json(data)
        if not isinstance(doc, dict):
            raise FrameError("route data is not a JSON object")
        queues = tuple(
            QueueData(
                broker_name=q["brokerName"],
                read_queue_nums=int(q.get("readQueueNums", 0)),
                write_queue_nums=int(q.get("writeQueueNums", 0)),
                perm=int(q.get("perm", 0)),
                # 4.0-4.8 spell it topicSynFlag
                topic_sys_flag=int(q.get("topicSysFlag", q.get("topicSynFlag", 0))),
            )
            for q in doc.get("queueDatas") or ()
        )
        brokers = tuple(
            BrokerData(
                cluster=b.get("cluster", ""),
                broker_name=b["brokerName"],
                broker_addrs={int(k): v for k, v in (b.get("brokerAddrs") or {}).items()},
            )
            for b in doc.get("brokerDatas") or ()
        )
        return cls(queues, brokers, doc.get("orderTopicConf") or None)

    def to_json(self) -> bytes:
        """Standard JSON in the Java field names (what the devbroker name server answers)."""
        doc: dict[str, Any] = {
            "brokerDatas": [
                {
                    "brokerAddrs": {str(k): v for k, v in b.broker_addrs.items()},
                    "brokerName": b.broker_name,
                    "cluster": b.cluster,
                }
                for b in self.broker_datas
            ],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": q.broker_name,
                    "perm": q.perm,
                    "readQueueNums": q.read_queue_nums,
                    "topicSysFlag": q.topic_sys_flag,
                    "topicSynFlag": q.topic_sys_flag,
                    "writeQueueNums": q.write_queue_nums,
                }
                for q in self.queue_datas
            ],
        }
        if self.order_topic_conf:
            doc["orderTopicConf"] = self.order_topic_conf
        return orjson.dumps(doc)

    def broker(self, name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == name:
                return b
        return None

    def master_addr(self, broker_name: str) -> str | None:
        b = self.broker(broker_name)
        return b.master_addr if b else None

    @property
    def is_ordered(self) -> bool:
        return bool(self.order_topic_conf)

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """Java's topicRouteData2TopicPublishInfo: writable queues of brokers that have a master."""
        if self.order_topic_conf:
            out: list[MessageQueue] = []
            for item in self.order_topic_conf.split(";"):
                name, _, count = item.partition(":")
                if name and count.isdigit():
                    out.extend(MessageQueue(topic, name, i) for i in range(int(count)))
            return out
        out = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if not q.perm & PERM_WRITE:
                continue
            b = self.broker(q.broker_name)
            if b is None or b.master_addr is None:
                continue
            out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return out

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Java's topicRouteData2TopicSubscribeInfo: readable queues of every broker."""
        return [
            MessageQueue(topic, q.broker_name, i)
            for q in sorted(self.queue_datas, key=lambda q: q.broker_name)
            if q.perm & PERM_READ
            for i in range(q.read_queue_nums)
        ]

    def clamp_queues(self, limit: int) -> TopicRouteData:
        """The default topic's route for auto-creation: at most ``limit`` queues per broker."""
        queues = tuple(
            QueueData(
                q.broker_name,
                min(limit, q.read_queue_nums),
                min(limit, q.write_queue_nums),
                q.perm,
                q.topic_sys_flag,
            )
            for q in self.queue_datas
        )
        return TopicRouteData(queues, self.broker_datas, self.order_topic_conf)


def master_addrs(routes: Iterable[TopicRouteData], into: dict[str, str] | None = None) -> dict[str, str]:
    """The master address of every broker in ``routes``, by broker name, added to ``into`` (a new dict
    when None); the last route naming a broker wins."""
    out = {} if into is None else into
    for route in routes:
        for b in route.broker_datas:
            if b.master_addr:
                out[b.broker_name] = b.master_addr
    return out
