"""Topic routes for the producer: cached, refreshed every 30 s and on demand (P1).

A topic the name server does not know is sent with the default topic's (TBW102) route, clamped to the
default queue count, so that a broker with autoCreateTopicEnable creates it, as the Java client does. A
topic it knows is sent only with its own route: one without a writable queue on a master (read-only, or its
master down) is RouteNotFound, as Java's "No route info of this topic" (its isHaveTopicRouterInfo), never
the template, which would create the topic on brokers it does not live on.

The cache forgets what is not used. Java keeps every topic a producer ever sent to, but its topics are its
application's own; the sidecar's are whatever names its clients send (any valid name, without
ROCKSIDECAR_TOPICS), each ~2.6 KB kept and one name-server request a refresh round. A topic not sent to
for ``idle_s`` (10 min) is dropped at a refresh round, and past ``max_topics`` (10 000) the least
recently used goes, so a burst of distinct names cannot grow it further. A dropped topic's next send asks
the name server again, as its first one did.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from ..codes import DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, PERM_WRITE
from ..errors import RocketMQError, RouteNotFound, TopicNotExist
from ..periodic import Periodic
from ..route import TopicRouteData
from ..singleflight import SingleFlight
from .publish_info import SendIndex, TopicPublishInfo

log = logging.getLogger(__name__)

ROUTE_REFRESH_S = 30.0
ROUTE_IDLE_S = 600.0  # a topic not used this long is dropped (at a refresh round)
MAX_TOPICS = 10_000  # cached topics at most; past it the least recently used goes

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
        idle_s: float = ROUTE_IDLE_S,
        max_topics: int = MAX_TOPICS,
    ) -> None:
        self._namesrv = namesrv
        self._on_change = on_change
        self._rng = rng or random.Random()
        self.default_topic = default_topic
        self._default_queue_nums = default_topic_queue_nums
        if max_topics < 1:
            raise ValueError(f"max_topics must be >= 1, got {max_topics}")
        self.max_topics = max_topics
        self._idle_rounds = max(1, math.ceil(idle_s / refresh_s))
        # Least recently used first, by refresh round: each round moves the topics used since the last
        # one to the end, and a new topic goes in at the end, so the idle ones are the first ones.
        self._infos: OrderedDict[str, TopicPublishInfo] = OrderedDict()
        # Topics sent to since the last round: Producer.with_retries adds each send's topic (``used``'s
        # add, bound there: one C call a send), get() too. A set, so what it holds is the cached topics
        # sent to, never more than the cache (a name without a route is never sent).
        self.used: set[str] = set()
        self._last_used: dict[str, int] = {}  # cached topic -> the round it was last used in
        self._round = 0
        self._pinned: set[str] = set()  # never forgotten (pin)
        # The cached publish info of a topic, or None: the dict's own get, a C call (once a send). A look
        # is no use (readiness and status look at every topic): a send marks its topic in ``used``.
        self.cached: Callable[[str], TopicPublishInfo | None] = self._infos.get
        self._inflight = SingleFlight[str, TopicPublishInfo](self._fetched)
        self._background: set[asyncio.Task[TopicPublishInfo]] = set()  # refresh_soon's, held until done
        self._refresher = Periodic("route-refresh", refresh_s, self.refresh_all, sleep)

    def topics(self) -> list[str]:
        return list(self._infos)

    def pin(self, topics: Iterable[str]) -> None:
        """Keep these topics' routes however long they go unused (the ones the settings name: readiness
        asks about them, and their first send should not wait for the name server)."""
        self._pinned.update(topics)

    def broker_addrs(self) -> dict[str, str]:
        """Master address of every broker in any cached route (heartbeats, probes)."""
        out: dict[str, str] = {}
        for info in self._infos.values():
            for b in info.route.broker_datas:
                if b.master_addr:
                    out[b.broker_name] = b.master_addr
        return out

    async def get(self, topic: str) -> TopicPublishInfo:
        info = self.cached(topic)
        if info is None:  # a new topic (its first use is noted as it is cached), or a name without a route
            return await self.refresh(topic)
        self.used.add(topic)  # a batch's
        return info

    async def refresh(self, topic: str) -> TopicPublishInfo:
        """Fetch the topic's route now; concurrent callers share one request. A failed refresh keeps
        the route already known, if any."""
        try:
            return await self._inflight.run(topic, lambda: self._fetch(topic))
        except RocketMQError:
            stale = self._usable(topic)
            if stale is not None:
                return stale
            raise

    def refresh_soon(self, topic: str) -> asyncio.Task[TopicPublishInfo]:
        """Start ``refresh(topic)`` in the background (sharing a refresh of it under way) and return it,
        for a send told its route is stale to go on with another broker of the known route meanwhile
        and await it only if none is left. Runs to its end whether awaited or not; close() stops it."""
        task = asyncio.ensure_future(self.refresh(topic))
        self._background.add(task)
        task.add_done_callback(self._refreshed_soon)
        return task

    def _refreshed_soon(self, task: asyncio.Task[TopicPublishInfo]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:  # retrieved: nobody may await it
            log.info("background route refresh failed: %s", exc)

    def _usable(self, topic: str) -> TopicPublishInfo | None:
        """The cached route of ``topic`` if it can be sent on."""
        info = self._infos.get(topic)
        return info if info is not None and info.ok else None

    def _fetched(self, topic: str, fut: asyncio.Future[TopicPublishInfo]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            old = self._infos.get(topic)
            new = self._infos[topic] = fut.result()  # a cached topic keeps its place in the order
            if old is None:  # asked for by a send (or readiness): used in the round under way
                self._last_used[topic] = self._round + 1
                if len(self._infos) > self.max_topics:  # the least recently used goes, never the new one
                    unpinned = (t for t in self._infos if t not in self._pinned and t != topic)
                    oldest = next(unpinned, None)
                    if oldest is not None:
                        self._forget(oldest)
            self._changed(topic, old, new)
        elif isinstance(exc, RouteNotFound) or self._usable(topic) is None:
            # RouteNotFound: the name server's route, without a writable queue (read-only), replaces the
            # one known before (as Java's); the topic's next send asks again, the route's return tells
            # on_change. Any other failure keeps a usable route, TOPIC_NOT_EXIST too (Java 4.9.4's
            # updateTopicRouteInfoFromNameServer keeps it on that exception): a name server restarted
            # empty answers it for every topic until the brokers register again (up to 30 s), and the
            # client sticks to a name server that answers, so forgetting dropped the route of every
            # topic in use in one refresh round. A topic deleted for good fails at its broker instead.
            self._forget(topic)

    def _forget(self, topic: str) -> None:
        self._infos.pop(topic, None)
        self._last_used.pop(topic, None)
        self.used.discard(topic)

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
        # The send index lives in the cached info only: it survives refreshes (as Java's sendWhichQueue),
        # and a name that gets no route leaves nothing behind.
        known = self._infos.get(topic)
        index = known.index if known is not None else SendIndex(self._rng.randrange(1 << 16))
        try:
            info = TopicPublishInfo.build(topic, await self._namesrv.get_route(topic), index)
        except TopicNotExist:
            if known is not None and known.ok and not known.auto_create:
                # Its own route known (a name server restarted empty says this of every topic): kept
                # (_fetched), never swapped for the template, which would create the topic elsewhere.
                raise
            # only a topic without a route of its own is sent with the template
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
        """One refresh round: forget the topics not used for ``idle_s``, then ask for the others."""
        self._forget_idle()
        for topic in list(self._infos):
            try:
                await self.refresh(topic)
            except RocketMQError as exc:
                log.warning("route refresh of %s failed: %s", topic, exc)

    def _forget_idle(self) -> None:
        self._round += 1
        used = [topic for topic in self._infos if topic in self.used]  # in their order: ties keep it
        self.used.clear()  # in place: the producer holds its add
        for topic in used:
            if topic in self._infos:
                self._infos.move_to_end(topic)
                self._last_used[topic] = self._round
        idle_since = self._round - self._idle_rounds
        idle = []
        for topic in self._infos:  # ordered by last use: stop at the first used since
            if self._last_used[topic] > idle_since:
                break
            if topic not in self._pinned:
                idle.append(topic)
        for topic in idle:
            log.debug("route of %s forgotten: not used for %d refresh rounds", topic, self._idle_rounds)
            self._forget(topic)

    async def close(self) -> None:
        await self._refresher.close()
        for task in list(self._background):
            task.cancel()
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
