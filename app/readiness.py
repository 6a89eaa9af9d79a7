"""/readyz: can a send succeed now? Yes when the store takes writes and some broker with a writable route
is not isolated (its last send failed and its back-off has not run out). With ROCKSIDECAR_TOPICS set,
each of those topics needs such a broker; otherwise any master the name server lists, or any broker of a
route already known, will do. Not ready still accepts work: it is spooled."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rocksidecar.rmq import NameServerClient, RocketMQError
from rocksidecar.rmq.producer import Producer
from rocksidecar.storage.reserve import DiskReserve

CACHE_S = 2.0  # the name server is asked at most this often

log = logging.getLogger("rocksidecar.events")


class StoreHealth(Protocol):
    @property
    def healthy(self) -> bool: ...
    @property
    def last_error(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class StoreProbe:
    """A StoreHealth read through two callables: each process root says how its store is read."""

    is_healthy: Callable[[], bool]
    error: Callable[[], str | None]

    @property
    def healthy(self) -> bool:
        return self.is_healthy()

    @property
    def last_error(self) -> str | None:
        return self.error()


def disk_draining(reserve: DiskReserve | None) -> str | None:
    """Why the disk reserve has been given up (the disk is full: the store drains, new work gets 503),
    or None when it has not (or there is no reserve). Checks first whether there is room again."""
    if reserve is None:
        return None
    reserve.check()
    return (reserve.reason or "the disk is full") if reserve.draining else None


def masters(cluster_info: dict[str, object]) -> set[str]:
    """Brokers with a master (brokerId 0) in GET_BROKER_CLUSTER_INFO's brokerAddrTable."""
    return set(master_addrs(cluster_info))


def master_addrs(cluster_info: dict[str, object]) -> dict[str, str]:
    """The master address (brokerId 0) of each broker in GET_BROKER_CLUSTER_INFO's brokerAddrTable."""
    table = cluster_info.get("brokerAddrTable")
    out: dict[str, str] = {}
    if isinstance(table, dict):
        for name, data in table.items():
            addrs = data.get("brokerAddrs") if isinstance(data, dict) else None
            for broker_id, addr in addrs.items() if isinstance(addrs, dict) else ():
                if str(broker_id) == "0":
                    out[str(name)] = str(addr)
    return out


class Readiness:
    def __init__(
        self,
        producer: Producer,
        namesrv: NameServerClient,
        store: StoreHealth,
        topics: Sequence[str],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._producer = producer
        self._namesrv = namesrv
        self._store = store
        self._topics = tuple(topics)
        self._clock = clock
        self._checked_at: float | None = None
        self._masters: set[str] | None = None  # None: the name server did not answer
        # Set when the first check (the start's) is not ready: the first ready check after it says so
        # once, with what it waited for; later flaps are /readyz's and the broker events' business.
        self._waiting: tuple[float, str] | None = None
        self._checked = False

    async def _listed_masters(self) -> set[str] | None:
        now = self._clock()
        if self._checked_at is None or now - self._checked_at > CACHE_S:
            try:
                self._masters = masters(await self._namesrv.get_cluster_info())
            except RocketMQError:
                self._masters = None
            self._checked_at = now
        return self._masters

    def _writable(self, topic: str) -> set[str]:
        info = self._producer.routes.cached(topic)  # a look, not a use: it keeps no topic
        return set(info.queues_by_broker) if info is not None and info.ok else set()

    async def check(self) -> tuple[bool, dict[str, Any]]:
        listed = await self._listed_masters()
        states = self._producer.fault_table()
        isolated = {b.broker for b in states if b.state == "isolated"}
        reasons: list[str] = []
        details: dict[str, Any] = {
            "store": "ok" if self._store.healthy else f"failing: {self._store.last_error}",
            "nameServer": "reachable" if listed is not None else "unreachable",
        }
        if not self._store.healthy:
            reasons.append(f"the local store cannot take writes: {self._store.last_error}")
        if self._topics:
            routes = {t: sorted(self._writable(t) - isolated) for t in self._topics}
            details["routes"] = routes
            for topic, usable in routes.items():
                if not usable:
                    why = "isolated" if self._writable(topic) else "unknown or not writable"
                    reasons.append(f"no broker to send {topic} to: its route is {why}")
        else:
            known = set(listed or ()) | {b for t in self._producer.routes.topics() for b in self._writable(t)}
            usable = sorted(known - isolated)
            details["writableBrokers"] = usable
            if not known:
                reasons.append(
                    "no broker known: the name server is unreachable"
                    if listed is None
                    else "the name server lists no broker"
                )
            elif not usable:
                reasons.append(f"every broker is isolated after failed sends: {', '.join(sorted(known))}")
        details["brokers"] = [b.to_json() for b in states]
        if reasons:
            details["reason"] = "; ".join(reasons)
        self._note(not reasons, details.get("reason", ""))
        return not reasons, details

    def _note(self, ready: bool, reason: str) -> None:
        """The moment a start that was not ready becomes ready (found by the next check: /readyz)."""
        first, self._checked = not self._checked, True
        if first and not ready:
            self._waiting = (self._clock(), reason)
        elif ready and self._waiting is not None:
            since, waited_for = self._waiting
            self._waiting = None
            waited_s = self._clock() - since
            log.info(
                "ready after %.1f s (waited for: %s)",
                waited_s,
                waited_for,
                extra={"event": "ready", "waited_s": round(waited_s, 3), "waited_for": waited_for},
            )
