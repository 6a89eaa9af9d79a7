"""Convergence: a replica has read the inner and marks topics up to where they stood when it started.

At start the replica notes each queue's max offset (GET_MAX_OFFSET; queues with nothing retained are
skipped). Its broadcast consumer starts from its own offsets on its volume, or from the earliest
retained message on an empty one, and the replica counts itself converged once every noted queue was
consumed up to its noted offset: it then holds the copies it should, and has applied every mark sent
before it started. Until then it publishes nothing and stays out of the publishers' group, and /readyz
says how many messages are left (rocksidecar_dmq_converge_backlog).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Protocol

from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import MessageQueue

log = logging.getLogger(__name__)

CHECK_S = 0.2  # how often the consumer's offsets are compared with the noted ones


class Offsets(Protocol):
    async def read(self, mq: MessageQueue, read_type: ReadType) -> int | None: ...


class Convergence:
    def __init__(self, offsets: Offsets) -> None:
        self._offsets = offsets  # the broadcast consumer's (on this replica's volume)
        self._targets: dict[MessageQueue, int] = {}
        self._at: dict[MessageQueue, int] = {}
        self.noted = False
        self.done = asyncio.Event()

    async def note(self, instance: ClientInstance, topics: Iterable[str]) -> None:
        """Note where each queue of ``topics`` ends now. A topic without a route or a broker that does
        not answer has nothing this replica could read now: it is not waited for (logged)."""
        for topic in topics:
            try:
                route = await instance.get_route(topic)
            except RocketMQError as exc:
                log.info("convergence: no route for %s (%s): nothing to read there", topic, exc)
                continue
            addrs = {b.broker_name: b.master_addr for b in route.broker_datas if b.master_addr}
            for mq in route.subscribe_queues(topic):
                addr = addrs.get(mq.broker_name)
                if addr is None:
                    continue
                try:
                    low = await instance.api.get_min_offset(addr, mq)
                    high = await instance.api.get_max_offset(addr, mq)
                except RocketMQError as exc:
                    log.warning("convergence: %s not noted: %s", mq, exc)
                    continue
                if high > low:
                    self._targets[mq] = high
        self.noted = True
        log.info("convergence: %d queues to read up to %d messages", len(self._targets), self.backlog)

    async def wait(self, check_s: float = CHECK_S) -> None:
        """Until the consumer's committed offset reached the noted one on every noted queue."""
        while True:
            for mq, target in list(self._targets.items()):
                at = await self._offsets.read(mq, ReadType.MEMORY)
                self._at[mq] = at or 0
                if at is not None and at >= target:
                    del self._targets[mq]
            if not self._targets:
                self.done.set()
                return
            await asyncio.sleep(check_s)  # polling the consumer's table: it has no event to await

    @property
    def backlog(self) -> int:
        """Messages left to read up to the noted offsets (queues never pulled yet count from 0)."""
        return sum(max(0, t - self._at.get(mq, 0)) for mq, t in self._targets.items())
