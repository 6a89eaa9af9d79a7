"""Clients a broker knows from HEART_BEAT: producer and consumer groups per connection, each consumer
group's subscriptions, expiry after 120 s without a heartbeat, and a NOTIFY_CONSUMER_IDS_CHANGED to
every member connection whenever a consumer group gains or loses a member (protocol reference §6)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rocksidecar.rmq.broker import parse_tags
from rocksidecar.rmq.connection import Connection

from .store import tag_code

CHANNEL_EXPIRED_TIMEOUT_S = 120.0  # ConsumerManager/ProducerManager CHANNEL_EXPIRED_TIMEOUT

Notify = Callable[[Connection, str], None]  # (member connection, consumer group)


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    topic: str
    expression: str
    codes: frozenset[int] | None  # tag codes to accept; None accepts every message
    expression_type: str = "TAG"
    sub_version: int = 0  # SubscriptionData.subVersion: a pull asking a newer one is refused


@dataclass(slots=True)
class _Member:
    client_id: str
    last_seen: float


@dataclass(slots=True)
class _Group:
    members: dict[Connection, _Member] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionInfo] = field(default_factory=dict)


def _subscription(doc: dict[str, Any]) -> SubscriptionInfo:
    expression = str(doc.get("subString") or "*")
    expression_type = str(doc.get("expressionType") or "TAG")
    tags = parse_tags(expression) if expression_type == "TAG" else []  # SQL92: no tags
    codes: frozenset[int] | None = None
    if tags:
        codes = frozenset(int(c) for c in doc.get("codeSet") or ()) or frozenset(tag_code(t) for t in tags)
    return SubscriptionInfo(
        str(doc["topic"]), expression, codes, expression_type, int(doc.get("subVersion") or 0)
    )


class ClientRegistry:
    def __init__(self, notify: Notify, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._notify = notify
        self._clock = clock
        self._consumers: dict[str, _Group] = {}
        self._producers: dict[str, _Group] = {}

    def heartbeat(self, conn: Connection, doc: dict[str, Any]) -> list[str]:
        """Register the client's groups on this connection; returns its consumer groups.

        Raises:
            ValueError: the heartbeat lacks a client id or a group name.
        """
        client_id = str(doc.get("clientID") or "")
        if not client_id:
            raise ValueError("heartbeat without clientID")
        now = self._clock()
        for producer in doc.get("producerDataSet") or ():
            group = self._producers.setdefault(_group_name(producer), _Group())
            group.members[conn] = _Member(client_id, now)
        consumer_groups = []
        for consumer in doc.get("consumerDataSet") or ():
            name = _group_name(consumer)
            consumer_groups.append(name)
            group = self._consumers.setdefault(name, _Group())
            joined = conn not in group.members
            group.members[conn] = _Member(client_id, now)
            subs = _newest(group.subscriptions, map(_subscription, consumer.get("subscriptionDataSet") or ()))
            topics_changed = subs.keys() != group.subscriptions.keys()
            group.subscriptions = subs
            if joined or topics_changed:  # as Java: a new channel, or a changed set of topics
                self._changed(name)
        return consumer_groups

    def unregister(self, client_id: str, producer_group: str | None, consumer_group: str | None) -> None:
        if producer_group and producer_group in self._producers:
            self._remove(self._producers, producer_group, lambda c, m: m.client_id == client_id)
        if (
            consumer_group
            and consumer_group in self._consumers
            and self._remove(self._consumers, consumer_group, lambda c, m: m.client_id == client_id)
        ):
            self._changed(consumer_group)

    def connection_closed(self, conn: Connection) -> None:
        for groups, notify in ((self._producers, False), (self._consumers, True)):
            for name in list(groups):
                if self._remove(groups, name, lambda c, m: c is conn) and notify:
                    self._changed(name)

    def scan_expired(self) -> set[Connection]:
        """Forget registrations not refreshed for 120 s; returns their connections (to be closed)."""
        deadline = self._clock() - CHANNEL_EXPIRED_TIMEOUT_S
        expired: set[Connection] = set()

        def stale(conn: Connection, member: _Member) -> bool:
            if member.last_seen < deadline:
                expired.add(conn)
                return True
            return False

        for groups, notify in ((self._producers, False), (self._consumers, True)):
            for name in list(groups):
                if self._remove(groups, name, stale) and notify:
                    self._changed(name)
        return expired

    def consumer_ids(self, group: str) -> list[str]:
        g = self._consumers.get(group)
        return list(dict.fromkeys(m.client_id for m in g.members.values())) if g else []

    def consumer_connection(self, group: str, client_id: str) -> Connection | None:
        """The connection a member of ``group`` registered on (ConsumerManager.findChannel)."""
        g = self._consumers.get(group)
        return next((c for c, m in g.members.items() if m.client_id == client_id), None) if g else None

    def consumer_connections(self, group: str) -> list[tuple[Connection, str]]:
        """Every member connection of ``group`` with its client id (ConsumerGroupInfo's channel table)."""
        g = self._consumers.get(group)
        return [(c, m.client_id) for c, m in g.members.items()] if g else []

    def producer_connection(self, group: str) -> Connection | None:
        """A connection of a producer of ``group`` (ProducerManager.getAvailableChannel): the newest
        registered, which is the one most likely still alive."""
        g = self._producers.get(group)
        return next(reversed(g.members), None) if g else None

    def producer_ids(self, group: str) -> list[str]:
        g = self._producers.get(group)
        return list(dict.fromkeys(m.client_id for m in g.members.values())) if g else []

    def connections_of(self, client_id: str) -> int:
        """How many connections the client registered groups on (1 when it shares one per broker)."""
        conns = {
            conn
            for groups in (self._producers, self._consumers)
            for g in groups.values()
            for conn, m in g.members.items()
            if m.client_id == client_id
        }
        return len(conns)

    def subscription(self, group: str, topic: str) -> SubscriptionInfo | None:
        g = self._consumers.get(group)
        return g.subscriptions.get(topic) if g else None

    def groups(self) -> dict[str, list[str]]:
        """Group names by kind, for the admin endpoint."""
        return {"producer": sorted(self._producers), "consumer": sorted(self._consumers)}

    # internals ----------------------------------------------------------------------------------
    @staticmethod
    def _remove(groups: dict[str, _Group], name: str, match: Callable[[Connection, _Member], bool]) -> bool:
        group = groups[name]
        gone = [c for c, m in group.members.items() if match(c, m)]
        for conn in gone:
            del group.members[conn]
        if not group.members:
            del groups[name]
        return bool(gone)

    def _changed(self, name: str) -> None:
        group = self._consumers.get(name)
        for conn in list(group.members) if group else ():
            self._notify(conn, name)


def _newest(
    held: dict[str, SubscriptionInfo], beat: Iterable[SubscriptionInfo]
) -> dict[str, SubscriptionInfo]:
    """The heartbeat's topics, each keeping the subscription held unless the beat's subVersion is newer
    (ConsumerGroupInfo.updateSubscription): members of a group beating different expressions do not
    take turns, the newest stays."""
    subs: dict[str, SubscriptionInfo] = {}
    for sub in beat:
        old = held.get(sub.topic)
        subs[sub.topic] = old if old is not None and sub.sub_version <= old.sub_version else sub
    return subs


def _group_name(doc: dict[str, Any]) -> str:
    name = doc.get("groupName")
    if not name:
        raise ValueError("heartbeat group without groupName")
    return str(name)
