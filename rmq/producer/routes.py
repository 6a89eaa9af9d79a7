"""Topic routes for the producer: cached, refreshed every 30 s and on demand (P1).

A topic the name server does not know is sent with the default topic's (TBW102) route, clamped to the
default queue count, so that a broker with autoCreateTopicEnable creates it, as the Java client does. A
topic it knows is sent only with its own route: one without a writable queue on a master (read-only, or its
master down) is RouteNotFound, as Java's "No route info of this topic" (its isHaveTopicRouterInfo), never
the template, which would create the topic on brokers it does not live on.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Protocol

from ..codes import DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, PERM_WRITE
from ..errors import RocketMQError, RouteNotFound, TopicNotExist
from ..periodic import Periodic
from ..route import TopicRouteData
from ..singleflight import SingleFlight
from .publish_info import SendIndex, TopicPublishInfo

log = logging.getLogger(__name__)

ROUTE_REFRESH_S = 30.0

# (topic, brokers before or None when there was no route, brokers now) when a topic's route appears or
# its set of writable brokers changes; the service logs it and replays what waited for the route.
RouteListener = Callable[[str, tuple[str, ...] | None, tuple[str, ...]], None]


class RouteSource(Protocol):
    """Where routes come from: the client instance (which keeps them for its heartbeat) or a bare
    NameServerClient."""

    async def get_route(self, topic: str) -> TopicRouteData: ...


class TopicRoutes:
    def __init__(
        self,
        namesrv: RouteSource,
        *,
        default_topic: str = DEFAULT_TOPIC,
        default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
        refresh_s: float = ROUTE_REFRESH_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        on_change: RouteListener | None = None,
    ) -> None:
        self._namesrv = namesrv
        self._on_change = on_change
        self._rng = rng or random.Random()
        self.default_topic = default_topic
        self._default_queue_nums = default_topic_queue_nums
        self._infos: dict[str, TopicPublishInfo] = {}
        # The cached publish info of a topic, or None: the dict's own get, a C call (once a send).
        self.cached: Callable[[str], TopicPublishInfo | None] = self._infos.get
        self._indexes: dict[str, SendIndex] = {}
        self._inflight = SingleFlight[str, TopicPublishInfo](self._fetched)
        self._refresher = Periodic("route-refresh", refresh_s, self.refresh_all, sleep)

    def topics(self) -> list[str]:
        return list(self._infos)

    def broker_addrs(self) -> dict[str, str]:
        """Master address of every broker in any cached route (heartbeats, probes)."""
        out: dict[str, str] = {}
        for info in self._infos.values():
            for b in info.route.broker_datas:
                if b.master_addr:
                    out[b.broker_name] = b.master_addr
        return out

    async def get(self, topic: str) -> TopicPublishInfo:
        info = self._infos.get(topic)
        if info is not None:
            return info
        return await self.refresh(topic)

    async def refresh(self, topic: str) -> TopicPublishInfo:
        """Fetch the topic's route now; concurrent callers share one request. A failed refresh keeps
        the route already known, if any."""
        try:
            return await self._inflight.run(topic, lambda: self._fetch(topic))
        except RocketMQError:
            stale = self._infos.get(topic)
            if stale is not None and stale.ok:
                return stale
            raise

    def _fetched(self, topic: str, fut: asyncio.Future[TopicPublishInfo]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            old = self._infos.get(topic)
            new = self._infos[topic] = fut.result()
            self._changed(topic, old, new)
        elif isinstance(exc, (TopicNotExist, RouteNotFound)):
            # The name server's answer, not a failure to get one: the route known before is gone (Java
            # replaces it). The topic's next send asks again; the route's return tells on_change.
            self._infos.pop(topic, None)

    def _changed(self, topic: str, old: TopicPublishInfo | None, new: TopicPublishInfo) -> None:
        if self._on_change is None:
            return
        before = _writable_brokers(old) if old is not None and old.ok else None
        after = _writable_brokers(new)
        if before != after:
            try:
                self._on_change(topic, before, after)
            except Exception:  # a listener must never break routing
                log.exception("route listener failed")

    async def _fetch(self, topic: str) -> TopicPublishInfo:
        index = self._indexes.get(topic)
        if index is None:
            index = self._indexes[topic] = SendIndex(self._rng.randrange(1 << 16))
        try:
            info = TopicPublishInfo.build(topic, await self._namesrv.get_route(topic), index)
        except TopicNotExist:
            pass  # only a topic without a route is sent with the template
        else:
            if info.ok:
                return info
            raise RouteNotFound(
                f"topic {topic!r} has no writable queue on a master broker: {_unwritable(info)}"
            )
        try:
            default = await self._namesrv.get_route(self.default_topic)
        except TopicNotExist:
            default = None
        if default is not None:
            fallback = TopicPublishInfo.build(
                topic, default.clamp_queues(self._default_queue_nums), index, auto_create=True
            )
            if fallback.ok:
                return fallback
        raise TopicNotExist(
            f"topic {topic!r} does not exist, and no broker auto-creates topics "
            f"(no writable {self.default_topic} route)",
            code=17,
        )

    # background refresh ------------------------------------------------------------------------
    def start(self) -> None:
        self._refresher.start()

    async def refresh_all(self) -> None:
        for topic in list(self._infos):
            try:
                await self.refresh(topic)
            except RocketMQError as exc:
                log.warning("route refresh of %s failed: %s", topic, exc)

    async def close(self) -> None:
        await self._refresher.close()
        self._inflight.cancel_all()


def _unwritable(info: TopicPublishInfo) -> str:
    """Why each broker of a route without writable queues has none (for the error and the spool)."""
    route = info.route
    if route.is_ordered:
        return f"orderTopicConf {route.order_topic_conf!r} names no queue"
    why = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if not q.perm & PERM_WRITE:
            why.append(f"{q.broker_name} not writable (perm {q.perm})")
        elif route.master_addr(q.broker_name) is None:
            why.append(f"{q.broker_name} has no master")
        else:
            why.append(f"{q.broker_name} has no write queue")
    return "; ".join(why) or "no broker"


def _writable_brokers(info: TopicPublishInfo) -> tuple[str, ...]:
    return tuple(sorted({q.broker_name for q in info.queues}))
