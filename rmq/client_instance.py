"""ClientInstance: what Java's MQClientInstance owns, shared by every producer and consumer on it.

One client id, one connection per broker (the RemotingClient), one name-server route table and ONE
heartbeat that carries every registered producer group and consumer group together, so that a broker
sees a single client rather than one per role. Broker requests (NOTIFY_CONSUMER_IDS_CHANGED) are routed
to the consumer of the group they name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from .acl import Credentials
from .broker import BrokerApi, ConsumerData
from .client_id import build_client_id, default_instance_name, default_ip
from .codes import RequestCode, ResponseCode
from .connection import Connection
from .errors import RocketMQError
from .message import PROPERTY_PGROUP, MessageExt
from .message_codec import decode_stored
from .namesrv import NameServerClient
from .periodic import Periodic
from .pool import Invoker, RemotingClient
from .protocol.frame import RemotingCommand
from .route import TopicRouteData, master_addrs
from .singleflight import SingleFlight
from .throttle import RepeatLog

log = logging.getLogger(__name__)

HEARTBEAT_S = 30.0  # Java's heartbeatBrokerInterval
# The route table holds the topics the producers and consumers on the instance ask for; the sidecar's
# producers send to whatever topics its clients name. A route nobody asked for in ROUTE_IDLE_S (the
# producer re-asks for each topic it keeps every 30 s, a consumer for each subscribed one every
# heartbeat) is dropped at the next heartbeat, and past MAX_ROUTES the least recently asked for goes at
# once. A topic a registered consumer subscribes to stays whatever its age: its brokers need the heartbeat.
ROUTE_IDLE_S = 600.0
MAX_ROUTES = 10_000

# A broker's request to a client: answered (or None for one-way) by the consumer of its group.
RequestHandler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand | None]]
# A broker's CHECK_TRANSACTION_STATE (one-way), with the half message it names decoded from its body.
CheckHandler = Callable[[Connection, RemotingCommand, MessageExt], Awaitable[None]]


# The header field naming the consumer group a broker's request is for, where it is not
# ``consumerGroup`` (ResetOffsetRequestHeader's and GetConsumerStatusRequestHeader's ``group``).
_GROUP_FIELD: dict[int, str] = {
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: "group",
    RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: "group",
}


@dataclass(frozen=True, slots=True)
class _ConsumerEntry:
    data: Callable[[], ConsumerData]  # read at every heartbeat: subscriptions change at run time
    on_request: RequestHandler


class ClientInstance:
    def __init__(
        self,
        namesrv: str | Sequence[str] | NameServerClient,
        *,
        remoting: RemotingClient | None = None,
        api: BrokerApi | None = None,
        client_id: str | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        credentials: Credentials | None = None,
        repeat_log: RepeatLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        route_idle_s: float = ROUTE_IDLE_S,
        max_routes: int = MAX_ROUTES,
    ) -> None:
        """``remoting``: connections the caller owns (then it must route broker requests to
        ``on_broker_request``); without, the instance opens and closes its own, signing every request
        with ``credentials`` (ACL) when given. ``repeat_log``: where the warnings that repeat while
        a broker is down go (heartbeats here, the consumers' persists, pulls, rebalances and routes)."""
        self.repeat_log = repeat_log or RepeatLog()
        self.client_id = client_id or build_client_id(default_ip(), default_instance_name())
        self._owned: RemotingClient | None = None
        self.invoker: Invoker
        if isinstance(namesrv, NameServerClient):
            self.namesrv = namesrv
            self.invoker = remoting or namesrv.invoker
        else:
            if remoting is None:
                remoting = self._owned = RemotingClient(
                    on_request=self.on_broker_request, credentials=credentials
                )
            self.invoker = remoting
            self.namesrv = NameServerClient(remoting, namesrv)
        self.api = api or BrokerApi(self.invoker)
        self._producers: set[str] = set()
        self._consumers: dict[str, _ConsumerEntry] = {}
        self._checkers: dict[str, CheckHandler] = {}
        self._routes: dict[str, TopicRouteData] = {}
        # One name-server lookup per topic at a time, shared by whoever asks meanwhile (the producers'
        # refreshes, the consumers', the DMQ's): each asking alone made one request per caller, and the
        # answer that came back last was kept, so a lookup asked first and answered last put back a
        # route older than the one stored since (a broker that had joined gone until the next refresh).
        self._lookups = SingleFlight[str, TopicRouteData]()
        self._asked: dict[str, float] = {}  # topic of _routes -> when last asked for, oldest first
        self._clock = clock
        self._route_idle_s = route_idle_s
        self.max_routes = max_routes
        # The route tables kept outside the instance's (each producer's cached routes): their brokers
        # are known (heartbeat, broker_addrs) while a route there names them, and no longer.
        self._route_holders: list[Callable[[], dict[str, str]]] = []
        self._heartbeat = Periodic("client-heartbeat", heartbeat_s, self.heartbeat, sleep)

    # registration ------------------------------------------------------------------------------
    def register_producer(self, group: str) -> None:
        self._producers.add(group)

    def unregister_producer(self, group: str) -> None:
        self._producers.discard(group)

    def register_transaction_checker(self, group: str, on_check: CheckHandler) -> None:
        """Route the brokers' CHECK_TRANSACTION_STATE for half messages of producer ``group`` (their
        PGROUP) to ``on_check``; the group is announced in every heartbeat from now on, which is how a
        broker knows it may ask this client."""
        if group in self._checkers:
            raise ValueError(f"producer group {group!r} already has a transaction checker")
        self._checkers[group] = on_check
        self._producers.add(group)

    def unregister_transaction_checker(self, group: str) -> None:
        self._checkers.pop(group, None)

    def register_consumer(
        self, group: str, data: Callable[[], ConsumerData], on_request: RequestHandler
    ) -> None:
        if group in self._consumers:
            raise ValueError(f"consumer group {group!r} is already registered on client {self.client_id}")
        self._consumers[group] = _ConsumerEntry(data, on_request)

    def unregister_consumer(self, group: str) -> None:
        self._consumers.pop(group, None)

    @property
    def producer_groups(self) -> list[str]:
        return sorted(self._producers)

    @property
    def consumer_groups(self) -> list[str]:
        return sorted(self._consumers)

    # routes ------------------------------------------------------------------------------------
    async def get_route(self, topic: str) -> TopicRouteData:
        """The name server's route of ``topic``, remembered in the instance's table (whose brokers
        the heartbeat goes to). A caller asking while a lookup of the topic runs gets that lookup's
        outcome; a caller that goes away leaves it running for the others."""
        if topic in self._asked:
            self._asked_now(topic)  # before the answer: a name server down must not age out a route in use
        return await self._lookups.run(topic, lambda: self._lookup(topic))

    async def _lookup(self, topic: str) -> TopicRouteData:
        # Stored here, inside the shared call: the next lookup of the topic starts only once this one has
        # ended, so the table's route is always the answer to the latest lookup that ended.
        route = await self.namesrv.get_route(topic)
        self._routes[topic] = route
        self._asked_now(topic)
        if len(self._routes) > self.max_routes:
            self._forget_unused()
        return route

    def _asked_now(self, topic: str) -> None:
        self._asked.pop(topic, None)  # to the end: the table stays ordered by last ask
        self._asked[topic] = self._clock()

    def _forget_unused(self) -> None:
        """Drop the routes asked for longest ago while they are idle or too many; never a subscribed
        topic's."""
        idle_before = self._clock() - self._route_idle_s
        excess = len(self._routes) - self.max_routes
        subscribed: set[str] | None = None
        unused: list[str] = []
        for topic, asked in self._asked.items():
            if excess <= 0 and asked > idle_before:
                break  # the rest were asked for later
            if subscribed is None:
                subscribed = {s.topic for c in self._consumers.values() for s in c.data().subscriptions}
            if topic not in subscribed:
                unused.append(topic)
                excess -= 1
        for topic in unused:
            del self._routes[topic], self._asked[topic]

    def hold_routes(self, broker_addrs: Callable[[], dict[str, str]]) -> None:
        """Count the brokers of a route table kept outside the instance's (a producer's cached routes:
        ``broker_addrs`` gives their master addresses by name) as known: they get the heartbeat and are
        in ``broker_addrs()`` while a route there names them. The instance's own table may drop a route
        the producer still sends on (past max_routes), so the broker it sends to is counted through its
        own table, read live: a broker that left every route is no longer heartbeated (Java's
        cleanOfflineBroker before each heartbeat round), where one noted at each send was for ever."""
        self._route_holders.append(broker_addrs)

    def release_routes(self, broker_addrs: Callable[[], dict[str, str]]) -> None:
        """Undo hold_routes (the producer closes)."""
        if broker_addrs in self._route_holders:
            self._route_holders.remove(broker_addrs)

    def broker_addrs(self) -> dict[str, str]:
        """Master address of every broker some route names now (the instance's table or a held one), by
        broker name; where two disagree, the instance's table wins."""
        known: dict[str, str] = {}
        for held in self._route_holders:
            known.update(held())
        return master_addrs(self._routes.values(), known)

    # heartbeat ---------------------------------------------------------------------------------
    async def heartbeat_to(self, addr: str, timeout_s: float = 3.0) -> None:
        """One HEART_BEAT to ``addr`` with every producer and consumer group; raises on failure."""
        consumers = [entry.data() for _, entry in sorted(self._consumers.items())]
        await self.api.heartbeat(
            addr, self.client_id, self.producer_groups, consumers=consumers, timeout_s=timeout_s
        )

    def node_addrs(self, *, slaves: bool = True) -> list[str]:
        """Java's brokerAddrTable: the address of every node (master and, with ``slaves``, each slave) of
        every broker some route names now; a held route (a producer's) gives its masters only."""
        addrs = set(self.broker_addrs().values())
        if slaves:
            for route in self._routes.values():
                for b in route.broker_datas:
                    addrs.update(b.broker_addrs.values())
        return sorted(addrs)

    async def heartbeat(self) -> None:
        """sendHeartbeatToAllBroker (4.9.4): with a consumer group on the instance, every node of every
        known broker, slaves too; producers only, the masters only. A member asks a slave for its group's
        members while the master is down (findConsumerIdList): a slave without our heartbeat answered a
        group without us (Java members took our queues as well, or a leaver's went to nobody). All
        nodes at once, each bounded by its timeout: a slave down must not hold up a master's heartbeat.
        Failures are logged (once per node while they repeat) and skipped."""
        self._forget_unused()
        if not self._producers and not self._consumers:
            return
        addrs = self.node_addrs(slaves=bool(self._consumers))
        await asyncio.gather(*(self._heartbeat_logged(addr) for addr in addrs))

    async def _heartbeat_logged(self, addr: str) -> None:
        try:
            await self.heartbeat_to(addr)
        except RocketMQError as exc:
            self.repeat_log.warning(
                log, ("heartbeat", addr), "client %s: heartbeat to %s failed: %s", self.client_id, addr, exc
            )

    async def unregister(
        self, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """UNREGISTER_CLIENT at every node of every known broker, slaves too (Java's unregisterClient: a
        slave asked for the members while the master is down must not keep a leaver), all at once."""
        if producer_group:
            self.unregister_producer(producer_group)
        if consumer_group:
            self.unregister_consumer(consumer_group)

        async def unregister_at(addr: str) -> None:
            try:
                await self.api.unregister_client(
                    addr,
                    self.client_id,
                    producer_group=producer_group,
                    consumer_group=consumer_group,
                    timeout_s=1.0,
                )
            except RocketMQError as exc:
                log.debug("client %s: unregister at %s failed: %s", self.client_id, addr, exc)

        await asyncio.gather(*(unregister_at(addr) for addr in self.node_addrs()))

    async def on_broker_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            await self._check_transaction(conn, cmd)
            return None  # one-way: the answer is an END_TRANSACTION of its own
        group = cmd.ext_fields.get(_GROUP_FIELD.get(cmd.code, "consumerGroup"), "")
        entry = self._consumers.get(group)
        if entry is not None:
            return await entry.on_request(conn, cmd)
        if cmd.code in (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, RequestCode.RESET_CONSUMER_CLIENT_OFFSET):
            return None  # one-way, for a group that left (or never was) here: nothing to do (Java)
        if cmd.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:  # Java: an empty table
            return cmd.response(ResponseCode.SUCCESS, body=b'{"consumerTable":{},"messageQueueTable":{}}')
        if cmd.code in (RequestCode.GET_CONSUMER_RUNNING_INFO, RequestCode.CONSUME_MESSAGE_DIRECTLY):
            return cmd.response(  # as Java's ClientRemotingProcessor
                ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer"
            )
        return cmd.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
        )

    async def _check_transaction(self, conn: Connection, cmd: RemotingCommand) -> None:
        # As ClientRemotingProcessor.checkTransactionState: the group is the half message's PGROUP.
        try:
            msg, _ = decode_stored(cmd.body)
        except (RocketMQError, ValueError) as exc:
            log.warning(
                "client %s: undecodable CHECK_TRANSACTION_STATE from %s: %s", self.client_id, conn.addr, exc
            )
            return
        group = msg.properties.get(PROPERTY_PGROUP, "")
        checker = self._checkers.get(group)
        if checker is None:
            log.warning(
                "client %s: CHECK_TRANSACTION_STATE from %s for group %r, which has no checker here",
                self.client_id,
                conn.addr,
                group,
            )
            return
        await checker(conn, cmd, msg)

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the periodic heartbeat (idempotent: every producer and consumer may call it)."""
        self._heartbeat.start()

    async def close(self) -> None:
        await self._heartbeat.close()
        self._lookups.cancel_all()  # a lookup the name server does not answer must not outlive us
        if self._owned is not None:
            await self._owned.close()

    async def __aenter__(self) -> ClientInstance:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
