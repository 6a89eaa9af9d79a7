"""Which replicas are live publishers: the broker's member list of one consumer group.

A replica joins the publishers' group (``<group>_publishers``) once it has converged (app.dmq.converge),
by adding that group to its client instance's heartbeat; it consumes nothing in it. Every replica reads
the group's member list (GET_CONSUMER_LIST_BY_GROUP) every ``interval_s`` and at once when a broker
says the list changed (NOTIFY_CONSUMER_IDS_CHANGED). A replica that stops leaves with UNREGISTER_CLIENT;
one that crashes leaves when the broker sees its connection close (at once for a killed process). No
lock to lapse: that is why a crashed replica's share is taken over in about ``interval_s``, not the 60 s
of a broker queue lock. A frozen replica keeps its connections and stays listed for the broker's channel
expiry (120 s without a heartbeat): with ``beats`` (app.dmq.beats), a listed replica is live only while
its beats on the presence topic are fresh, which takes a frozen one out within ``beats.timeout_ms``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rocksidecar.rmq.broker import ConsumerData, Subscription
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.protocol.frame import RemotingCommand

from .beats import Beats

log = logging.getLogger(__name__)

MAX_MEMBERS = 1024  # a member list longer than this is not ours: the rest is ignored


def instance_of(client_id: str) -> str:
    """The instance name of a client id ``ip@instance[@unit]`` (the whole id when it has no ``@``)."""
    parts = client_id.split("@")
    return parts[1] if len(parts) > 1 else client_id


class Presence:
    def __init__(
        self,
        instance: ClientInstance,
        group: str,
        topic: str,
        me: str,
        *,
        interval_s: float = 1.0,
        on_change: Callable[[frozenset[str]], None] = lambda _live: None,
        beats: Beats | None = None,
    ) -> None:
        self._instance = instance
        self.group = group
        self._topic = topic  # the group's subscription (the marks topic): a member must subscribe to one
        self._me = me
        self._interval_s = interval_s
        self._on_change = on_change
        self._others: frozenset[str] = frozenset()
        self.beats = beats
        self._reported: frozenset[str] = frozenset()  # the live set last logged
        self.joined = False
        self.known = False  # a member list was read at least once
        self._poke = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def listed(self) -> frozenset[str]:
        """The replicas in the broker's last member list (and this one once joined)."""
        return self._others | {self._me} if self.joined else self._others

    @property
    def live(self) -> frozenset[str]:
        """The replicas that publish now: listed, and with a fresh beat when beats are read."""
        listed = self.listed
        if self.beats is None:
            return listed
        return frozenset(n for n in listed if self.beats.fresh(n))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="dmq-presence")

    async def join(self) -> None:
        """Become a publisher: in the group's member list from the next heartbeat, sent now."""
        if self.joined:
            return
        self._instance.register_consumer(self.group, self._data, self._on_request)
        self.joined = True
        self._report()
        await self._instance.heartbeat()

    async def leave(self) -> None:
        """Stop publishing: the brokers drop this member at once and tell the others."""
        if self.joined:
            self.joined = False
            await self._instance.unregister(consumer_group=self.group)

    async def close(self) -> None:
        await self.leave()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _data(self) -> ConsumerData:
        return ConsumerData(
            self.group,
            (Subscription(self._topic),),
            message_model="BROADCASTING",
            consume_type="CONSUME_PASSIVELY",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
        )

    async def _on_request(self, _conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            self._poke.set()
            return None
        return cmd.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
        )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._poke.clear()
            await self.refresh()
            self._report()
            until = loop.time() + self._interval_s
            while (left := until - loop.time()) > 0 and not self._poke.is_set():
                # A beat going stale is a change of the live set at that instant, not at the next round:
                # the scheduler asks its gate again on each change (take-overs wait for nothing else).
                stale_in = self._stale_in_s()
                wait = left if stale_in is None else min(left, stale_in)
                try:
                    await asyncio.wait_for(self._poke.wait(), max(wait, 0.001))
                except TimeoutError:
                    self._report()

    def _stale_in_s(self) -> float | None:
        if self.beats is None:
            return None
        stale = self.beats.next_stale_ms()
        return None if stale is None else (stale - self.beats.now_ms()) / 1000

    async def refresh(self) -> None:
        """Ask one broker after another for the member list; keep the last answer when none answers
        (brokers or their routes down: no member changes can be seen, and none is assumed). A list
        without this replica, once joined, is a broker that lost its client table (a restart): it gets
        a heartbeat, and the next broker is asked (its list would make others look gone, too)."""
        for addr in sorted(set(self._instance.broker_addrs().values())):
            try:
                ids = await self._instance.api.get_consumer_list(addr, self.group, timeout_s=1.0)
                members = {instance_of(cid) for cid in ids[:MAX_MEMBERS]}
                if self.joined and self._me not in members:
                    await self._instance.heartbeat_to(addr, timeout_s=1.0)
                    continue
            except RocketMQError as exc:
                log.debug("publishers of %s from %s: %s", self.group, addr, exc)
                continue
            others = frozenset(members - {self._me})
            self.known = True
            if others != self._others:
                self._others = others
                self._report()
            return

    def _report(self) -> None:
        """Log and tell ``on_change`` when the live set changed (a member list, or a beat gone stale
        or fresh again: a beat going stale is seen when it does, one fresh again at the next round)."""
        live = self.live
        if live != self._reported:
            self._reported = live
            stale = sorted(self.listed - live)
            log.info("dmq publishers now: %s%s", ", ".join(sorted(live)) or "none",
                     f" (listed but silent: {', '.join(stale)})" if stale else "")  # fmt: skip
            self._on_change(live)
