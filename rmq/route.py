"""Topic routes from the name server, and the queue lists derived from them. Pure: no I/O.

Name servers before 4.9.4 (and every GET_BROKER_CLUSTER_INFO in 4.x) write fastjson's integer map keys
unquoted, ``{0:"10.0.0.9:10911"}``; ``parse_lenient_json`` quotes them outside string literals.

A route is the name server's word, checked before it is used: Java builds one MessageQueue per queue the
route names (2**31-1 of them if it says so). ``from_json`` refuses a whole route (FrameError, which the
caller logs; the route known before stays in use) whose shape is wrong or that passes a bound below:
queues per broker, queues in all, brokers, addresses per broker, JSON size.
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
from .protocol.numbers import INT32_MAX, INT32_MIN, java_int

# Bounds on a route (per topic). Real ones are far below: a few brokers of 8 to 64 queues each.
MAX_QUEUE_NUMS = 1024  # read or write queues of one broker (and of one orderTopicConf item)
MAX_ROUTE_QUEUES = 16384  # queues of every broker of the route together
MAX_ROUTE_BROKERS = 256  # entries of queueDatas, and of brokerDatas
MAX_BROKER_ADDRS = 64  # a master and its slaves (a DLedger group has 3 to 9)
MAX_ROUTE_JSON_BYTES = 4 * 1024 * 1024

# The longest text of a number read here: an int's digits with a sign and some leading zeros.
_MAX_NUMBER_TEXT = 20

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BARE_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def parse_lenient_json(data: bytes | str) -> Any:
    """json.loads that also accepts fastjson's unquoted integer keys."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:  # orjson refuses bytes that are not UTF-8; so does this, as the FrameError a peer's answer gets
        text = data.decode() if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise FrameError(f"JSON that is not UTF-8: {exc}") from exc
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
        raise FrameError(f"undecodable JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker name's addresses by broker id (0 is the master)."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def subscribe_addr(self, broker_id: int, only_this_broker: bool) -> tuple[str, bool] | None:
        """MQClientInstance.findBrokerAddressInSubscribe (4.9.4): (address, is a slave) of node
        ``broker_id``; for a slave missing, the next id; else, unless ``only_this_broker``, any node the
        route lists (a slave while the master is down, so that its queues are still consumed). None
        when nothing fits. Java takes its HashMap's first entry, the smallest id for the small ones."""
        addr = self.broker_addrs.get(broker_id)
        if addr is not None:
            return addr, broker_id != MASTER_ID
        if broker_id != MASTER_ID and (addr := self.broker_addrs.get(broker_id + 1)) is not None:
            return addr, True  # Java keeps slave = (asked id is not the master's): true here
        if only_this_broker or not self.broker_addrs:
            return None
        first = min(self.broker_addrs)
        return self.broker_addrs[first], first != MASTER_ID


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
        """The route in a name server's answer; FrameError when it is malformed or past a bound."""
        if len(data) > MAX_ROUTE_JSON_BYTES:
            raise FrameError(f"route JSON of {len(data)} bytes exceeds {MAX_ROUTE_JSON_BYTES}")
        doc = parse_lenient_json(data)
        if not isinstance(doc, dict):
            raise FrameError("route data is not a JSON object")
        queues = tuple(_queue_data(q) for q in _entries(doc, "queueDatas"))
        brokers = tuple(_broker_data(b) for b in _entries(doc, "brokerDatas"))
        order = doc.get("orderTopicConf") or None
        if order is not None and not isinstance(order, str):
            raise FrameError("route's orderTopicConf is not a string")
        total = sum(max(q.read_queue_nums, q.write_queue_nums) for q in queues)
        total += sum(count for _, count in _order_items(order or ""))
        if total > MAX_ROUTE_QUEUES:
            raise FrameError(f"route names {total} queues, more than {MAX_ROUTE_QUEUES}")
        return cls(queues, brokers, order)

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
        """Java's topicRouteData2TopicPublishInfo: writable queues of brokers that have a master. Unlike
        subscribe_queues, a list as Java's is: a broker named twice has its queues twice (sends lean to
        them), and the index a sharding key picks stays the one a Java producer picks."""
        if self.order_topic_conf:
            return [
                MessageQueue(topic, name, i)
                for name, count in _order_items(self.order_topic_conf)
                for i in range(count)
            ]
        out: list[MessageQueue] = []
        for q in sorted(self.queue_datas, key=_java_name_order):  # Java's Collections.sort(qds)
            if not q.perm & PERM_WRITE:
                continue
            b = self.broker(q.broker_name)
            if b is None or b.master_addr is None:
                continue
            out.extend(MessageQueue(topic, q.broker_name, i) for i in range(q.write_queue_nums))
        return out

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Java's topicRouteData2TopicSubscribeInfo: readable queues of every broker, each once. Java
        collects them in a HashSet, so a route naming a broker twice gives its queues once; a list with
        a queue twice would make the allocation strategies give it to two members."""
        return list(
            dict.fromkeys(
                MessageQueue(topic, q.broker_name, i)
                for q in sorted(self.queue_datas, key=lambda q: q.broker_name)
                if q.perm & PERM_READ
                for i in range(q.read_queue_nums)
            )
        )

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


def is_host_port(addr: str) -> bool:
    """``host:port`` with a port a socket accepts (an IPv6 host in brackets)."""
    host, sep, port = addr.rpartition(":")
    # ASCII digits only ('²' is a digit to str.isdigit, not to int(); int() reads other scripts' digits),
    # and few: int() refuses more than 4300 of them with a ValueError.
    return (
        bool(sep and host.strip("[]"))
        and len(port) <= _MAX_NUMBER_TEXT
        and port.isascii()
        and port.isdigit()
        and 0 < int(port) < 65536
    )


def _entries(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = doc.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise FrameError(f"route's {key} is not a list of objects")
    if len(items) > MAX_ROUTE_BROKERS:
        raise FrameError(f"route has {len(items)} {key}, more than {MAX_ROUTE_BROKERS}")
    return items


def _int(value: object, what: str, low: int = INT32_MIN, high: int = INT32_MAX) -> int:
    """A route number as Java's int field reads it, within [low, high]."""
    # java_int's int() raises ValueError past 4300 digits; no int of Java's needs more than these.
    too_long = type(value) is str and len(value) > _MAX_NUMBER_TEXT
    number = None if too_long else java_int(value, low, high)
    if number is None:
        raise FrameError(f"route's {what} {str(value)[:40]!r} is not an integer in [{low}, {high}]")
    return number


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise FrameError(f"route's {what} is not a non-empty string")
    return value


def java_string_key(text: str) -> bytes:
    """Sort key giving Java's String.compareTo order: UTF-16 code units, where a character past U+FFFF (a
    surrogate pair, 0xD800.. first) sorts before U+E000..U+FFFF, unlike Python's code point order. Here,
    below both the producer's and the consumer's sides (the consumer's allocation sorts with it too)."""
    return text.encode("utf-16-be", "surrogatepass")


def _java_name_order(q: QueueData) -> bytes:
    """QueueData.compareTo: by broker name, in Java String order."""
    return java_string_key(q.broker_name)


def _queue_data(q: dict[str, Any]) -> QueueData:
    name = _name(q.get("brokerName"), "queueDatas brokerName")
    nums = f"broker {name}'s"
    return QueueData(
        broker_name=name,
        read_queue_nums=_int(q.get("readQueueNums", 0), f"{nums} readQueueNums", 0, MAX_QUEUE_NUMS),
        write_queue_nums=_int(q.get("writeQueueNums", 0), f"{nums} writeQueueNums", 0, MAX_QUEUE_NUMS),
        # unknown permission bits are kept and ignored, as Java's PermName tests bits one by one
        perm=_int(q.get("perm", 0), f"{nums} perm"),
        # 4.0-4.8 spell it topicSynFlag
        topic_sys_flag=_int(q.get("topicSysFlag", q.get("topicSynFlag", 0)), f"{nums} topicSysFlag"),
    )


def _broker_data(b: dict[str, Any]) -> BrokerData:
    name = _name(b.get("brokerName"), "brokerDatas brokerName")
    cluster = b.get("cluster") or ""
    addrs = b.get("brokerAddrs") or {}
    if not isinstance(cluster, str) or not isinstance(addrs, dict):
        raise FrameError(f"route's broker {name} has a cluster or brokerAddrs of the wrong type")
    if len(addrs) > MAX_BROKER_ADDRS:
        raise FrameError(f"route's broker {name} has {len(addrs)} addresses, more than {MAX_BROKER_ADDRS}")
    out: dict[int, str] = {}
    for key, addr in addrs.items():
        if not isinstance(addr, str) or not is_host_port(addr):
            raise FrameError(f"route's broker {name} has an address {str(addr)[:80]!r} that is not host:port")
        out[_int(key, f"broker {name}'s broker id")] = addr
    return BrokerData(cluster=cluster, broker_name=name, broker_addrs=out)


def _order_items(conf: str) -> list[tuple[str, int]]:
    """orderTopicConf ``broker-a:8;broker-b:8`` as (broker, queue count); malformed items skipped."""
    out: list[tuple[str, int]] = []
    for item in conf.split(";"):
        name, _, count = item.partition(":")
        if name and count.isascii() and count.isdigit():
            out.append((name, _int(count, f"orderTopicConf count of {name}", 0, MAX_QUEUE_NUMS)))
    return out


def master_addrs(routes: Iterable[TopicRouteData], into: dict[str, str] | None = None) -> dict[str, str]:
    """The master address of every broker in ``routes``, by broker name, added to ``into`` (a new dict
    when None); the last route naming a broker wins."""
    out = {} if into is None else into
    for route in routes:
        for b in route.broker_datas:
            if b.master_addr:
                out[b.broker_name] = b.master_addr
    return out
