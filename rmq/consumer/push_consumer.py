"""A push consumer built on pull, like Java's DefaultMQPushConsumerImpl.

One asyncio task per owned queue long-polls the broker (PULL_MESSAGE, 32 at a time, held up to 15 s),
caches what arrives in the queue's ProcessQueue and hands it to the concurrent or orderly service. The
group's queues are re-divided on start, every 20 s and as soon as a broker sends
NOTIFY_CONSUMER_IDS_CHANGED. Offsets are persisted every 5 s and on close, before the client
unregisters, so the other members take over at once from where this one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from ..acl import Credentials
from ..broker import EXPRESSION_TAG, EXPRESSION_TYPES, BrokerApi, ConsumerData, Subscription
from ..client_id import build_client_id, default_instance_name, default_ip
from ..client_instance import ClientInstance
from ..clock import wall_ms
from ..codes import MASTER_ID, RequestCode, ResponseCode
from ..connection import Connection
from ..errors import BrokerError, ClientError, FrameError, RocketMQError
from ..lifecycle import Lifecycle
from ..message import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRAN_MSG,
    RETRY_PREFIX,
    Message,
    MessageExt,
    MessageQueue,
)
from ..message_codec import decode_stored
from ..msgid import new_uniq_id
from ..pool import RemotingClient
from ..protocol.frame import RemotingCommand
from ..result import PullResult, PullStatus
from ..route import BrokerData, TopicRouteData, master_addrs
from . import queue_tables
from .broker_calls import (
    QueueLocker,
    check_client_config,
    delay_level_for,
    send_back,
)
from .commit_window import QueueWindow
from .config import (
    CONCURRENT_MAX_RECONSUME_TIMES,
    DLQ_PREFIX,
    ConsumerConfig,
    MessageListener,
    MessageModel,
)
from .consume_concurrently import ConcurrentService
from .consume_orderly import OrderlyService
from .direct import consume_directly
from .holdings import read_holdings
from .offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadType,
    RemoteOffsetStore,
    default_offsets_path,
)
from .process_queue import ProcessQueue
from .queue_state import QueueState
from .rebalance import allocate_queues, consume_timestamp, start_offset
from .running_info import CLIENT_VERSION_NAME, encode_running_info, queue_info, stacks
from .stats import Stats
from .sticky import AllocateSticky
from .topic_stats import TopicStats

log = logging.getLogger(__name__)

INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # MixAll.CLIENT_INNER_PRODUCER_GROUP
RESEND_ATTEMPTS = 3  # a sync send's 1 + retryTimesWhenSendFailed (2)
RESEND_TIMEOUT_S = 3.0  # sendMsgTimeout, for all of them
ORDERLY_UNLOCK_WAIT_S = 1.0  # Java's removeUnnecessaryMessageQueue tries the consume lock for 1 s


class PushConsumer(Lifecycle):
    def __init__(
        self,
        config: ConsumerConfig,
        namesrv: str,
        listener: MessageListener,
        *,
        client: RemotingClient | None = None,
        instance: ClientInstance | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``instance``: the client instance (client id, routes, connections, one heartbeat) shared
        with other producers and consumers. Without, the consumer makes its own over ``namesrv``,
        signing every request (heartbeat, pull, offsets, send-back, locks) with ``credentials`` (ACL)
        when given; with ``client`` too, the caller owns the connections (and their signing) and must
        route broker requests to ``on_broker_request``."""
        self.config = config
        self.listener = listener
        # Where CONSUME_FROM_TIMESTAMP starts a queue without a committed offset: fixed now, for every
        # queue added in the consumer's life, as Java's consumeTimestamp (rebalance.consume_timestamp).
        self._consume_timestamp_ms = consume_timestamp(config, wall_ms())
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv,
            remoting=client,
            client_id=build_client_id(
                config.client_ip or default_ip(),
                config.instance_name or default_instance_name(),
                config.unit_name,
            ),
            heartbeat_s=config.heartbeat_interval_s,
            credentials=credentials,
        )
        self.client_id = self.instance.client_id
        self._client = self.instance.invoker
        self._ns = self.instance
        self.api = self.instance.api
        # Java's consumer sends through its client's inner producer (_resend_to_retry)
        self._inner_api = BrokerApi(self._client, producer_group=INNER_PRODUCER_GROUP)
        self.offsets: OffsetStore
        if config.message_model is MessageModel.BROADCASTING:
            self.offsets = LocalFileOffsetStore(
                default_offsets_path(self.client_id, config.group, config.offsets_dir)
            )
        else:
            self.offsets = RemoteOffsetStore(
                self.api, config.group, self._offset_addr, repeat_log=self.instance.repeat_log
            )
        self._subs: dict[str, Subscription] = {}
        self._routes: dict[str, TopicRouteData] = {}
        self.queues: dict[MessageQueue, QueueState] = {}
        self.stats = Stats()
        self.topic_stats = TopicStats(time.monotonic)  # statusTable of GET_CONSUMER_RUNNING_INFO
        self._concurrent = ConcurrentService(self)
        self._orderly = OrderlyService(self)
        self._rebalance_now = asyncio.Event()
        self._refresh_now = asyncio.Event()  # a topic without a route, or a send-back: ask at once
        self._route_retry_s = config.route_retry_s
        self._closing = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()
        # Orderly queues removed while their listener call outlasted ORDERLY_UNLOCK_WAIT_S: out of
        # ``queues``, but their broker locks are renewed (lock_all) until the call ends (_unlock_when_idle).
        self._leaving: set[QueueState] = set()
        self._rebalance_lock = asyncio.Lock()
        self.started = False
        self._start_done = asyncio.Event()  # set while no start() is under way (close() waits for one)
        self._start_done.set()
        self._started_ms = 0

    # subscriptions and lifecycle ---------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = EXPRESSION_TAG) -> None:
        """What to receive: tags (``*`` or ``TagA || TagB``) or, with ``expression_type`` SQL92, a
        filter the broker evaluates on the message properties (``a > 5 AND TAGS IN ('A')``; the broker
        needs enablePropertyFilter, checked at start). Before or after start (then a rebalance
        follows)."""
        if not topic or topic.startswith(RETRY_PREFIX):
            raise ValueError(f"cannot subscribe to {topic!r}")
        if expression_type not in EXPRESSION_TYPES:
            known = ", ".join(EXPRESSION_TYPES)
            raise ValueError(f"expression type must be one of {known}, got {expression_type!r}")
        if expression_type != EXPRESSION_TAG and not expression.strip():
            raise ValueError(f"a {expression_type} expression cannot be empty")  # FilterAPI.build
        self._subs[topic] = Subscription(topic, expression or "*", expression_type=expression_type)
        if self.started:
            self._route_retry_s = self.config.route_retry_s  # a new topic: the short back-off again
            self._refresh_now.set()  # its route may be new; the refresh rebalances
            self._rebalance_now.set()

    def unsubscribe(self, topic: str) -> None:
        self._subs.pop(topic, None)
        if self.started:
            self._rebalance_now.set()

    def _subscriptions(self) -> list[Subscription]:
        subs = list(self._subs.values())
        if self.config.message_model is MessageModel.CLUSTERING:
            # Messages sent back come through the group's retry topic (copySubscription).
            subs.append(Subscription(RETRY_PREFIX + self.config.group, "*"))
        return subs

    async def start(self) -> None:
        """Register, heartbeat, rebalance and start the timers. close() during start() stops it after its
        current step (and start() returns): nothing of the consumer runs once close() has returned."""
        if self.started or not self._start_done.is_set():
            raise ClientError("the consumer is already started")
        if self._closing.is_set():
            raise ClientError("the consumer is closed")
        if not self._subs:
            raise ClientError("subscribe to at least one topic before start")
        self._start_done.clear()
        try:
            await self._start()
        finally:
            self._start_done.set()

    async def _start(self) -> None:
        for step in (self.offsets.load, self.refresh_routes, self.check_client_in_broker):
            await step()
            if self._closing.is_set():
                # close() came before anything was registered and has returned: undo what is ours here
                if self._own_instance:
                    await self.instance.close()
                return
        self.instance.register_consumer(self.config.group, self.consumer_data, self.on_broker_request)
        self.started = True
        self._started_ms = wall_ms()
        # the refresh: the heartbeat made the broker create the group's retry topic
        for step in (self.heartbeat, self.refresh_routes, self.rebalance):
            await step()
            if self._closing.is_set():
                return  # close() waits for this return, then undoes the registration and the queues
        self._loops = [
            self._loop(self.rebalance, self.config.rebalance_interval_s, self._rebalance_now),
            self._loop(self.persist_offsets, self.config.persist_interval_s),
            self._loop(
                self._refresh_round, self.config.heartbeat_interval_s, self._refresh_now, self._route_wait
            ),
            self._loop(self._flush_log, self.instance.repeat_log.window_s),
        ]
        self.instance.start()  # the periodic heartbeat, for every group on the instance
        if self.config.orderly and self.config.message_model is MessageModel.CLUSTERING:
            self._loops.append(self._loop(self.lock_all, self.config.lock_interval_s))

    async def check_client_in_broker(self) -> None:
        """checkClientInBroker: every broker serving a non-TAG subscription's topic must accept the
        filter, or the consumer would start and never receive a message. Raises SubscriptionError
        (or the broker's error) naming the topic, the expression and the broker's reason."""
        for sub in self._subs.values():
            if sub.is_tag:
                continue
            route = self._routes.get(sub.topic)
            for b in route.broker_datas if route else ():
                if not b.master_addr:
                    continue
                try:
                    await check_client_config(
                        self._client, b.master_addr, self.config.group, self.client_id, sub
                    )
                except BrokerError as exc:
                    raise ClientError(
                        f"group {self.config.group}: broker {b.broker_name} refuses the "
                        f"{sub.expression_type} filter {sub.expression!r} on topic {sub.topic}: {exc}"
                    ) from exc
                except RocketMQError as exc:
                    # Unreachable now: start anyway (a broker that returns is asked by its pulls,
                    # which fail visibly in the log and the pull_errors stat if it refuses).
                    log.warning(
                        "group %s: could not check the %s filter with broker %s: %s",
                        self.config.group,
                        sub.expression_type,
                        b.broker_name,
                        exc,
                    )

    async def close(self) -> None:
        """Stop pulling, let running listener calls finish (up to close_timeout_s), persist offsets,
        release orderly locks, then unregister so that the group rebalances at once."""
        if self._closing.is_set():
            return
        if not self._start_done.is_set():  # start() is under way: it stops after its current step
            self._closing.set()
            if not self.started:
                return  # nothing registered, no queue, no timer yet
            await self._start_done.wait()  # then undo what it did, below
        elif not self.started:
            return
        self._closing.set()
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        # Copies throughout: a queue's removal under way (an operator's reset re-adding it) may still
        # take it out of ``queues`` while close() awaits. A queue a cancelled rebalance was removing is
        # still listed (dropped): it is persisted, waited for and unlocked with the others.
        states = list(self.queues.values())
        for state in states:
            state.poke()
        await self._drain(states)
        mqs = [state.mq for state in states]
        for state in states:
            state.pq.drop()
        try:
            await self.offsets.persist_all(mqs)
        except RocketMQError as exc:  # the offsets file not written: logged, the shutdown goes on (Java)
            log.error("group %s: persisting the offsets on close failed: %s", self.config.group, exc)
        if self.config.orderly and self.config.message_model is MessageModel.CLUSTERING:
            # with the queues removed while busy whose call outlasted the drain too (left to lapse, their
            # next owners would wait 60 s)
            await self._unlock(mqs + [s.mq for s in self._leaving if s.mq not in mqs])
        await self._unregister()
        for state in states:
            await self._stop_tasks(state)
        self.queues.clear()
        await self._concurrent.stop()
        leftover = list(self._side_tasks)
        for task in leftover:
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)
        if self._own_instance:
            await self.instance.close()

    async def _drain(self, states: list[QueueState]) -> None:
        """Wait for in-flight listener calls; pulls are cancelled first so nothing new arrives."""
        for state in states:
            if state.pull_task is not None:
                state.pull_task.cancel()
        busy = [t for s in states for t in s.tasks if t is not s.pull_task] + list(self._side_tasks)
        pool = asyncio.ensure_future(self._concurrent.drain(self.config.close_timeout_s))
        await asyncio.wait([*busy, pool], timeout=self.config.close_timeout_s)
        pool.cancel()

    @staticmethod
    async def _stop_tasks(state: QueueState) -> None:
        for task in list(state.tasks):
            task.cancel()
        await asyncio.gather(*state.tasks, return_exceptions=True)

    def _loop(
        self,
        fn: Callable[[], Awaitable[None]],
        interval_s: float,
        wake: asyncio.Event | None = None,
        next_wait: Callable[[float], float] | None = None,
    ) -> asyncio.Task[None]:
        """Run ``fn`` every ``interval_s`` (or sooner when ``wake`` is set); ``next_wait`` may shorten
        the wait before the next round."""

        async def run() -> None:
            # Stops once close() has begun: a loop waiting on ``_closing`` would otherwise find it set and
            # run at once, for ever (close() cancels the loops, but may come before start() made them).
            while not self._closing.is_set():
                event = wake or self._closing
                wait_s = next_wait(interval_s) if next_wait else interval_s
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await event.wait()
                if self._closing.is_set():
                    return
                if wake is not None:
                    wake.clear()
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("group %s: %s failed", self.config.group, getattr(fn, "__name__", fn))

        return asyncio.get_running_loop().create_task(run())

    @property
    def closing(self) -> bool:
        """close() has begun: no new listener call starts."""
        return self._closing.is_set()

    async def wait_closing(self, timeout_s: float) -> bool:
        """Wait ``timeout_s`` or until close() starts; True when closing."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._closing.wait()
        return self._closing.is_set()

    def spawn(self, state: QueueState, coro: Coroutine[Any, Any, None], *, is_pull: bool = False) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        if is_pull:
            state.pull_task = task
        state.tasks.add(task)
        task.add_done_callback(state.tasks.discard)
        task.add_done_callback(_log_failure)

    # routes, heartbeats, broker requests -------------------------------------------------------
    async def refresh_routes(self) -> bool:
        """Fetch every subscribed topic's route; True when one appeared or changed (a rebalance is due)."""
        changed = False
        for sub in self._subscriptions():
            try:
                route = await self._ns.get_route(sub.topic)
            except RocketMQError as exc:
                # The retry topic appears with the first heartbeat; before that its absence is normal.
                if sub.topic.startswith(RETRY_PREFIX):
                    log.debug("group %s: no route for %s: %s", self.config.group, sub.topic, exc)
                else:
                    self.instance.repeat_log.warning(
                        log,
                        ("route", self.config.group, sub.topic),
                        "group %s: no route for %s: %s",
                        self.config.group,
                        sub.topic,
                        exc,
                    )
                continue
            changed |= self._routes.get(sub.topic) != route
            self._routes[sub.topic] = route
        return changed

    def _missing_routes(self) -> bool:
        return any(s.topic not in self._routes for s in self._subscriptions())

    async def _refresh_round(self) -> None:
        """The route timer: refresh, and rebalance at once when a route appeared or changed (a topic
        created after subscribing, the retry topic after a send-back) rather than at the next 20 s
        rebalance. While a topic has no route, the next round comes sooner (_route_wait)."""
        if await self.refresh_routes():
            # A broker new to this client must know the group before the rebalance asks it for the
            # members (Java's subscribe after start heartbeats too); the heartbeat logs its failures.
            await self.heartbeat()
            if self._missing_routes():
                await self.refresh_routes()  # the heartbeat made the broker create the retry topic
            self._rebalance_now.set()
        if self._missing_routes():
            self._route_retry_s = min(self._route_retry_s * 2, self.config.heartbeat_interval_s)
        else:
            self._route_retry_s = self.config.route_retry_s

    def _route_wait(self, interval_s: float) -> float:
        """1 s, doubling up to the interval, while a subscribed topic has no route."""
        return min(self._route_retry_s, interval_s) if self._missing_routes() else interval_s

    def _warn(self, cause: tuple[object, ...], msg: str, *args: object) -> None:
        """A warning that repeats while a broker is down: one line per cause, then a summary."""
        group = self.config.group
        self.instance.repeat_log.warning(log, (group, *cause), "group %s: " + msg, group, *args)

    async def _flush_log(self) -> None:
        self.instance.repeat_log.flush()  # summaries of storms that stopped

    def _broker_addrs(self) -> dict[str, str]:
        return master_addrs(self._routes.values())

    def read_addr(self, broker_name: str) -> str | None:
        """Where a broker's queue figures (max offset) are asked, from the routes known now (no lookup):
        its master, else a slave while the master is down (BrokerData.selectBrokerAddr, where 4.9.4's
        mqadmin consumerProgress and topicStatus ask: a queue consumed from the slave still has a lag)."""
        found = self._subscribe_addr(broker_name, MASTER_ID)
        return found[0] if found else None

    async def _broker_addr(self, broker_name: str) -> str | None:
        addr = self._broker_addrs().get(broker_name)
        if addr is None:
            await self.refresh_routes()
            addr = self._broker_addrs().get(broker_name)
        return addr

    def _subscribe_addr(
        self, broker_name: str, broker_id: int, only_this_broker: bool = False
    ) -> tuple[str, bool] | None:
        """findBrokerAddressInSubscribe on the routes known now: (address, is a slave) of node
        ``broker_id`` of the broker, else what Java falls back to (BrokerData.subscribe_addr). Every
        route's addresses of the broker together, as master_addrs takes a master from any route."""
        addrs: dict[int, str] = {}
        for route in self._routes.values():
            b = route.broker(broker_name)
            if b is not None:
                addrs.update(b.broker_addrs)
        return BrokerData("", broker_name, addrs).subscribe_addr(broker_id, only_this_broker)

    async def _offset_addr(self, broker_name: str) -> str | None:
        """Where RemoteBrokerOffsetStore (4.9.4) reads and commits a queue's offset: the master; when the
        routes list none, after a refresh, any node of the broker (its slave while the master is down: a
        4.9.4 slave stores the commit and answers it, until the master is back and the slave copies the
        master's offsets over it; the consumer's commits then go to the master again). Also where a
        queue is added (_add_queue)."""
        found = self._subscribe_addr(broker_name, MASTER_ID, only_this_broker=True)
        if found is None:
            await self.refresh_routes()
            found = self._subscribe_addr(broker_name, MASTER_ID)
        return found[0] if found else None

    def consumer_data(self) -> ConsumerData:
        cfg = self.config
        return ConsumerData(
            cfg.group,
            tuple(self._subscriptions()),
            message_model=cfg.message_model.value,
            consume_type="CONSUME_PASSIVELY",
            consume_from_where=cfg.consume_from.value,
        )

    async def heartbeat(self) -> None:
        """The instance's heartbeat now (it carries this group with every other one)."""
        await self.instance.heartbeat()

    async def on_broker_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            if cmd.ext_fields.get("consumerGroup") == self.config.group:
                self.stats.bump("notified")
                self._rebalance_now.set()
            return None
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            group = cmd.ext_fields.get("consumerGroup", "")
            if group != self.config.group:
                msg = f"The Consumer Group <{group}> not exist in this consumer"
                return cmd.response(ResponseCode.SYSTEM_ERROR, msg)
            jstack = cmd.ext_fields.get("jstackEnable", "").lower() == "true"  # mqadmin consumerStatus -s
            return cmd.response(ResponseCode.SUCCESS, body=self.running_info(jstack=jstack))
        if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            return await self._consume_directly(cmd)
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            self._on_reset(conn, cmd)
            return None  # one-way
        if cmd.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:  # mqadmin getConsumerStatus
            status = self.consumer_status(cmd.ext_fields.get("topic", ""))
            return cmd.response(ResponseCode.SUCCESS, body=status)
        return cmd.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
        )

    async def _consume_directly(self, cmd: RemotingCommand) -> RemotingCommand:
        """The message the broker attached, to the listener once (rmq.consumer.direct)."""
        try:
            msg, _ = decode_stored(cmd.body, limit=self.config.max_body_bytes)
        except FrameError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the message to consume is undecodable: {exc}")
        msg = self._restore_topic(msg)
        mq = MessageQueue(msg.topic, cmd.ext_fields.get("brokerName", ""), msg.queue_id)
        self.stats.bump("consumed_directly")
        body = await consume_directly(self.listener, msg, mq, orderly=self.config.orderly)
        return cmd.response(ResponseCode.SUCCESS, body=body)

    def _on_reset(self, conn: Connection, cmd: RemotingCommand) -> None:
        topic = cmd.ext_fields.get("topic", "")
        log.info(
            "group %s: reset of %s's offsets (timestamp %s) from broker %s",
            self.config.group, topic, cmd.ext_fields.get("timestamp"), conn.addr,
        )  # fmt: skip
        try:
            table = queue_tables.offsets(
                queue_tables.loads(cmd.body, "ResetOffsetBody").get("offsetTable") if cmd.body else {},
                "ResetOffsetBody",
            )
        except (FrameError, AttributeError) as exc:
            log.warning("group %s: reset of %s from %s refused: %s", self.config.group, topic, conn.addr, exc)
            return
        self.reset_offsets(topic, table)

    def reset_offsets(self, topic: str, table: Mapping[MessageQueue, int]) -> list[MessageQueue]:
        """What RESET_CONSUMER_CLIENT_OFFSET asks (``mqadmin resetOffsetByTime`` on a group that is
        online: each broker works out its queues' offsets and tells every member), as Java's
        MQClientInstance.resetOffset: each queue of ``topic`` in ``table`` that this member consumes is
        dropped (a message in flight no longer moves its offset), its offset set to the table's, and
        then removed and added again by a rebalance from there, after offset_illegal_wait_s
        (``_readd_queue``). Queues others consume are theirs to reset. Returns the queues reset."""
        done: list[MessageQueue] = []
        for mq, offset in table.items():
            state = self.queues.get(mq)
            if mq.topic != topic or state is None:
                continue
            self.offsets.update(mq, offset, increase_only=False)
            done.append(mq)
            log.info("group %s: %s reset to offset %d", self.config.group, mq, offset)
            if not state.pq.dropped:  # dropped: its re-add is under way and persists the offset just set
                self._drop_and_readd(state)
        self.stats.bump("offsets_reset", len(done))
        return done

    def consumer_status(self, topic: str) -> bytes:
        """GetConsumerStatusBody of ``topic``'s offsets in memory (Java's cloneOffsetTable(topic))."""
        table = {mq: o for mq, o in self.offsets.snapshot().items() if mq.topic == topic}
        return b'{"consumerTable":{},"messageQueueTable":' + queue_tables.table_json(table) + b"}"

    def running_info(self, *, jstack: bool = False) -> bytes:
        """ConsumerRunningInfo (DefaultMQPushConsumerImpl.consumerRunningInfo): settings, subscriptions
        and every owned queue's state, as ``mqadmin consumerStatus`` reads it; ``jstack``: the process's
        threads and tasks too (running_info.stacks)."""
        cfg = self.config
        props = {
            "consumerGroup": cfg.group,
            "messageModel": cfg.message_model.value,
            "consumeFromWhere": cfg.consume_from.value,
            "allocateMessageQueueStrategy": cfg.allocate.name,
            "pullBatchSize": str(cfg.pull_batch_size),
            "consumeMessageBatchMaxSize": str(cfg.consume_batch_size),
            "PROP_CONSUMEORDERLY": str(cfg.orderly).lower(),
            "PROP_THREADPOOL_CORE_SIZE": str(cfg.consume_concurrency),
            "PROP_CONSUMER_START_TIMESTAMP": str(self._started_ms),
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CLIENT_VERSION": CLIENT_VERSION_NAME,
            "PROP_NAMESERVER_ADDR": ";".join(self.instance.namesrv.addresses),
        }
        now, wall = asyncio.get_running_loop().time(), wall_ms()
        queues = {mq: queue_info(st.pq, now, wall) for mq, st in self.queues.items()}
        subs = self._subscriptions()
        self.topic_stats.forget({s.topic for s in subs})
        status = {s.topic: self.topic_stats.status(s.topic) for s in subs}
        subs_json = (s.to_json() for s in subs)
        return encode_running_info(props, subs_json, queues, status, stacks() if jstack else None)

    async def _unregister(self) -> None:
        await self.instance.unregister(consumer_group=self.config.group)

    async def send_back(self, msg: MessageExt, mq: MessageQueue, *, dead: bool = False) -> bool:
        """CONSUMER_SEND_MSG_BACK to the queue's broker, to be redelivered after the delay the broker
        picks (delay level 0, as Java's default delayLevelWhenNextConsume: 3 + the reconsume times of
        the broker's stored copy; ``msg.reconsume_times`` may be one more, counted here after a failed
        send-back for the listener alone), or with ``dead`` straight to the group's DLQ (delay level -1).
        When that fails, the message is sent as a new one to the group's retry topic (Java's fallback,
        _resend_to_retry); not a dead one: that would deliver it again, and an undecodable body cannot be
        sent. False when nothing worked (the caller consumes it here again later)."""
        cfg = self.config
        addr = self._broker_addrs().get(mq.broker_name)
        try:
            if addr is None:
                raise ClientError(f"broker {mq.broker_name} is not in the routes")
            await send_back(
                self._client,
                addr,
                msg,
                cfg.group,
                delay_level=-1 if dead else 0,
                max_reconsume_times=self._send_back_max(),
            )
        except RocketMQError as exc:
            self._warn(("send-back", mq.broker_name), "send-back of %s failed: %s", msg.msg_id, exc)
            if dead or not await self._resend_to_retry(msg, mq):
                return False
        else:
            self.stats.bump("sent_back")
        if RETRY_PREFIX + cfg.group not in self._routes:
            # It comes back through the retry topic: without its route (the broker made the topic a
            # moment ago) the redelivery would wait for the 30 s route refresh.
            self._refresh_now.set()
        return True

    def _send_back_max(self) -> int:
        """The maximum Java's push consumer tells the broker whatever the mode (getMaxReconsumeTimes:
        unset is 16; orderly applies its own, unlimited, limit here and sends only dead messages)."""
        limit = self.config.max_reconsume_times
        return CONCURRENT_MAX_RECONSUME_TIMES if limit is None else limit

    async def _resend_to_retry(self, msg: MessageExt, mq: MessageQueue) -> bool:
        """Java's DefaultMQPushConsumerImpl.sendMessageBack after a failed CONSUMER_SEND_MSG_BACK: the
        message as a new one to %RETRY%group, by the client's inner producer (group CLIENT_INNER_PRODUCER,
        up to 3 attempts within 3 s, as its sync send with retryTimesWhenSendFailed 2, each on another
        broker when there is one), starting with the message's own broker. It carries RETRY_TOPIC,
        ORIGIN_MESSAGE_ID, RECONSUME_TIME (reconsume times + 1, which the broker stores as the count: the
        DLQ comes after MAX_RECONSUME_TIMES as with a send-back) and delay level 3 + reconsume times: it is
        out of the queue, which moves past it, rather than retried here at once for ever."""
        topic = RETRY_PREFIX + self.config.group
        try:
            route = self._routes.get(topic) or await self._ns.get_route(topic)
        except RocketMQError as exc:
            self._warn(("resend", topic), "no route for %s to resend %s: %s", topic, msg.msg_id, exc)
            return False
        queues = sorted(route.publish_queues(topic), key=lambda q: q.broker_name != mq.broker_name)
        props = dict(msg.properties)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)  # UNIQ_KEY, else the offset id
        props[PROPERTY_RETRY_TOPIC] = msg.topic  # the original topic (_restore_topic)
        props[PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times + 1)
        most = self._send_back_max()
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(most)
        props.pop(PROPERTY_TRAN_MSG, None)
        props[PROPERTY_DELAY] = str(delay_level_for(msg.reconsume_times))
        uniq = msg.uniq_key or new_uniq_id()  # the original UNIQ_KEY stays, as Java's setUniqID
        new = Message(topic, msg.body, properties=props, flag=msg.flag, id=uniq)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESEND_TIMEOUT_S
        for attempt in range(RESEND_ATTEMPTS if queues else 0):
            target = queues[attempt % len(queues)]
            addr = route.master_addr(target.broker_name)
            left = deadline - loop.time()
            if addr is None or left <= 0:
                break
            try:
                await self._inner_api.send(
                    addr,
                    target,
                    new,
                    uniq,
                    left,
                    reconsume_times=msg.reconsume_times + 1,
                    max_reconsume_times=most,
                )
            except RocketMQError as exc:
                self._warn(("resend", target.broker_name), "resend of %s to %s failed: %s", uniq, target, exc)
                continue
            self.stats.bump("resent_to_retry")
            return True
        return False

    # rebalance ---------------------------------------------------------------------------------
    async def rebalance(self) -> None:
        async with self._rebalance_lock:  # the timer and a notification may fire together
            if self._closing.is_set():
                return
            self.stats.bump("rebalances")
            wanted: set[MessageQueue] = set()
            topics = {s.topic for s in self._subscriptions()}
            for topic in topics:
                try:
                    share = await self._topic_share(topic)
                except Exception as exc:
                    # Java's doRebalance/rebalanceByTopic: a strategy that fails on one topic (Environment(3)
                    # on a 2-queue %RETRY% topic) leaves that topic's queues as they are, and the others
                    # still rebalance; escaping here would fail start() and cut every later round short.
                    self._warn(("allocation failed", topic), "allocation of %s failed, kept: %r", topic, exc)
                    share = None
                if share is None:  # no route or no member list this time: keep what we have (Java)
                    share = {mq for mq in self.queues if mq.topic == topic}
                wanted |= share
            for mq in [m for m in self.queues if m not in wanted]:
                await self._remove_queue(mq)
            new = [mq for mq in wanted if mq not in self.queues]
            if new and self.config.orderly and self.config.message_model is MessageModel.CLUSTERING:
                new = sorted(await self._lock(new), key=str)  # Java: no lock, no queue (next round)
            for mq in new:
                await self._add_queue(mq)
        self.stats.bump("rebalances_done")

    async def _topic_share(self, topic: str) -> set[MessageQueue] | None:
        """Our queues of ``topic``, or None when that cannot be known now."""
        route = self._routes.get(topic)
        if route is None:
            return None
        mq_all = route.subscribe_queues(topic)
        if self.config.message_model is MessageModel.BROADCASTING:
            return allocate_queues(self.config, self.client_id, mq_all, [])
        cids = await self._consumer_ids(route)
        if not cids or not mq_all:
            self._warn(("allocation", topic), "no consumer list or no queues for %s; allocation kept", topic)
            return None
        strategy = self.config.allocate
        if isinstance(strategy, AllocateSticky):  # it computes from what every member holds now
            mine = {mq for mq in self.queues if mq.topic == topic}
            held = await read_holdings(
                self.api,
                self._holdings_addr(route),
                self.config.group,
                topic,
                cids,
                self.client_id,
                mine,
                strategy.timeout_s,
            )
            strategy = strategy.knowing(held or {})  # unknown: the stateless BoundedHash result
        return allocate_queues(self.config, self.client_id, mq_all, cids, strategy)

    @staticmethod
    def _group_addrs(route: TopicRouteData) -> list[tuple[str, str]]:
        """(broker name, address) of each broker of the route where the group's members are asked: its
        master, else a slave (findConsumerIdList asks findBrokerAddrByTopic: one broker's selectBrokerAddr;
        Java members heartbeat every node, so a slave knows them). Masters first, so a slave is asked
        only when the masters fail: with every master down the member list still comes, as Java's does
        (before, the allocation stayed frozen for the whole failover: a member joining or leaving then
        was never given or relieved of its share, and queues were consumed twice or not at all)."""
        brokers = sorted(route.broker_datas, key=lambda b: (b.master_addr is None, b.broker_name))
        found = ((b.broker_name, b.subscribe_addr(MASTER_ID, False)) for b in brokers)
        return [(name, node[0]) for name, node in found if node is not None]

    @classmethod
    def _holdings_addr(cls, route: TopicRouteData) -> str:
        # called only once a member list came, so the route lists a node (a slave when no master is up)
        return cls._group_addrs(route)[0][1]

    async def _consumer_ids(self, route: TopicRouteData) -> list[str]:
        """The group's members, or [] when no broker of the route answers (the caller then keeps its
        allocation, as Java's rebalanceByTopic does when cidAll is null)."""
        for name, addr in self._group_addrs(route):
            try:
                ids = await self.api.get_consumer_list(addr, self.config.group)
            except RocketMQError as exc:
                self._warn(("consumer list", name), "consumer list from %s failed: %s", addr, exc)
                continue
            if ids:
                return ids
        return []

    async def _add_queue(self, mq: MessageQueue) -> None:
        # A queue whose master is down is added while a slave is listed (Java's subscribe queues and
        # offset reads need no master), and pulled from the slave. The start offset's broker calls
        # (max offset, search by time, for a group without a committed offset) go to that slave too:
        # Java asks the master only and leaves the queue for the next rebalance; a slave's answer lags
        # the master's at most, so the queue starts no later than Java's would, nothing is skipped.
        addr = await self._offset_addr(mq.broker_name)
        if addr is None:
            return
        try:
            offset = await start_offset(
                self.config, self.offsets, self.api, addr, mq, self._consume_timestamp_ms
            )
        except RocketMQError as exc:
            self._warn(
                ("start offset", mq.broker_name), "no start offset for %s: %s; next rebalance", mq, exc
            )
            return
        state = QueueState(mq, ProcessQueue(offset), window=QueueWindow(self.config.commit_window, offset))
        if self.config.orderly and self.config.message_model is MessageModel.CLUSTERING:
            state.pq.locked, state.pq.last_lock_at = True, asyncio.get_running_loop().time()
        self.queues[mq] = state
        self.stats.bump(f"queues_added:{mq.topic}")  # process queues built, per topic
        self.spawn(state, self._pull_loop(state), is_pull=True)
        if self.config.orderly:
            self._orderly.start_queue(state)
        log.info("group %s: consuming %s from offset %d", self.config.group, mq, offset)

    async def _readd_queue(self, mq: MessageQueue) -> None:
        """After offset_illegal_wait_s, remove the queue the usual way (persisting the offset set in
        memory, unlocking), then let a rebalance add it again from there."""
        if await self.wait_closing(self.config.offset_illegal_wait_s):
            return  # close() persists the corrected offset with the rest
        try:
            async with self._rebalance_lock:
                if mq in self.queues:
                    await self._remove_queue(mq)
        finally:
            self._rebalance_now.set()  # the queue is out of ``queues`` whatever failed: add it again

    async def _remove_queue(self, mq: MessageQueue) -> None:
        """Drop first (no result of this queue moves the offset any more), then send its offset to the
        broker and forget it; orderly mode also releases the broker's lock (once the running listener
        call ends, if it outlasts ORDERLY_UNLOCK_WAIT_S: _unlock_when_idle). The offset goes one-way, as
        Java's removeUnnecessaryMessageQueue sends it: awaiting the answer under the rebalance lock, a
        slow broker held up every other queue's addition for up to 3 s per removed queue. The queue stays
        in ``queues`` (dropped) until all that is done, as Java's processQueueTable keeps it: an
        operator's reset arriving before the offset is sent still finds it (its offset is what is sent),
        and a close() cancelling the rebalance half-way still persists, waits for and unlocks it. A reset
        arriving while it is being sent (a route refresh, a connect) is lost: the offset in memory is
        forgotten right after, and what was sent may land on the broker after its reset. Java loses it
        the same way (persist, then removeOffset); not fixed here. Whatever fails (but for close()'s
        cancel), the queue is taken out of ``queues``: left there dropped, no rebalance added it again."""
        state = self.queues[mq]
        state.pq.drop()
        state.poke()
        if state.pull_task is not None:
            state.pull_task.cancel()
        cancelled = False
        try:
            await self._let_go(state)
        except asyncio.CancelledError:
            cancelled = True  # close() is cancelling the rebalance: it finds the queue and ends it
            raise
        finally:
            if not cancelled:
                if self.queues.get(mq) is state:
                    del self.queues[mq]
                # Listener calls still running are left to finish (their results are ignored: the queue
                # is dropped); close() waits for them like for any other.
                for task in state.tasks:  # the cancelled pull too, until it has wound down
                    self._side_tasks.add(task)
                    task.add_done_callback(self._side_tasks.discard)
                # committed and (orderly) unlocked, or unlocked once the call running on it ends: another
                # member may take it
                self.stats.bump("queues_removed")

    async def _let_go(self, state: QueueState) -> None:
        """The removal's commit of the dropped queue's offset and (orderly) its unlock."""
        mq = state.mq
        idle = True
        if self.config.orderly:
            # Unlocking while our listener still works on a message would let the next owner start on
            # the following one: wait a moment for the call (only a call: a loop waiting out a SUSPEND
            # holds nothing); if it is still busy the lock is kept until the call ends (below) or close().
            idle = await self._orderly.wait_idle(mq, ORDERLY_UNLOCK_WAIT_S)
        try:
            # Even when busy (Java persists first too): the offset in memory only moves on results of the
            # queue before its drop, or by a reset arriving during the wait, which must reach the broker.
            await self.offsets.persist(mq)  # one-way to a broker
        except RocketMQError as exc:  # no route, no connection, the offsets file not written
            self._warn(("commit of removed", mq.broker_name), "committing removed %s failed: %s", mq, exc)
        self.offsets.remove(mq)
        if self.config.orderly and self.config.message_model is MessageModel.CLUSTERING:
            if idle:
                await self._unlock([mq])
            else:
                # Java's removal returns false here and keeps the process queue, whose lock lockAll renews:
                # left to lapse under the running call, the lock would let the next owner consume the
                # following messages meanwhile. Keep renewing it and unlock once the call is over.
                self.stats.bump("orderly_unlocks_deferred")
                self._leaving.add(state)
                task = asyncio.get_running_loop().create_task(self._unlock_when_idle(state))
                self._side_tasks.add(task)
                task.add_done_callback(self._side_tasks.discard)
                task.add_done_callback(_log_failure)

    async def _unlock_when_idle(self, state: QueueState) -> None:
        """The end of a removal whose orderly call was still running: once no call runs on the queue
        (none starts: its process queue is dropped, and a queue added again waits for the call too),
        release its broker lock, unless the rebalance gave the queue back to this member meanwhile (the
        lock is then the re-added queue's). Under the rebalance lock, so as not to unlock a queue that a
        rebalance has locked and is adding. close() unlocks those still waiting when it does."""
        mq = state.mq
        try:
            await self._orderly.wait_idle(mq, None)
            async with self._rebalance_lock:
                if mq not in self.queues:
                    await self._unlock([mq])
        finally:
            self._leaving.discard(state)
        self.stats.bump("orderly_deferred_unlocks_done")

    # orderly locks -----------------------------------------------------------------------------
    def _locker(self) -> QueueLocker:
        return QueueLocker(self._client, self.config.group, self.client_id)

    async def _lock(
        self, mqs: list[MessageQueue], answered: set[MessageQueue] | None = None
    ) -> set[MessageQueue]:
        """The queues of ``mqs`` locked now; ``answered`` gets those whose broker answered (locked or
        not): a broker not found or failing says nothing of its locks."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        locked: set[MessageQueue] = set()
        for broker, group in by_broker.items():
            addr = await self._broker_addr(broker)
            if addr is None:
                continue
            try:
                locked |= await self._locker().lock(addr, group)
            except RocketMQError as exc:
                self._warn(("lock", broker), "locking queues on %s failed: %s", broker, exc)
                continue
            if answered is not None:
                answered.update(group)
        return locked

    async def lock_all(self) -> None:
        """Renew the locks of every owned queue, and of those removed while their listener call runs
        (lockAll, every 20 s). Only the owned queues asked for are updated: one the rebalance added (and
        locked) while the request was out is not in the answer."""
        asked = dict(self.queues)
        # Queues removed under a running listener call keep their lock until the call ends (_remove_queue).
        leaving = {s.mq for s in self._leaving} - asked.keys()
        answered: set[MessageQueue] = set()
        locked = await self._lock([*asked, *sorted(leaving, key=str)], answered)
        now = asyncio.get_running_loop().time()
        for mq, state in asked.items():
            if self.queues.get(mq) is not state:
                continue  # removed meanwhile, or removed and added (and locked) again
            if mq in locked:
                state.pq.locked, state.pq.last_lock_at = True, now
                state.poke()
            elif mq in answered:
                state.pq.locked = False
            # else its broker failed or is not found: Java's lockAll changes nothing then (the lock's
            # expiry, lock_valid, still pauses consumption), so a blip does not stop pulls for a round.

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, group in by_broker.items():
            addr = self._broker_addrs().get(broker)
            if addr is None:
                continue
            try:
                await self._locker().unlock(addr, group)
            except RocketMQError as exc:
                log.warning("group %s: unlocking on %s failed: %s", self.config.group, broker, exc)

    # offsets -----------------------------------------------------------------------------------
    def count_consumed(self, mq: MessageQueue, ok: int, failed: int, took_s: float) -> None:
        self.stats.bump("consume_ok", ok)
        self.stats.bump("consume_failed", failed)
        self.topic_stats.consumed(mq.topic, ok, failed, took_s)

    def advanced(self, state: QueueState, committed: int) -> None:
        if state.window.wants_persist(committed) and not state.pq.dropped:
            state.window.persisting = True
            self.spawn(state, self._persist_window(state))

    async def _persist_window(self, state: QueueState) -> None:
        """Persist the queue's offset until the acknowledged one is within half a window of the
        committed one, opening the window as each persist is acknowledged; a failed persist is tried
        again (the window stays shut meanwhile: that is the bound)."""
        window, mq = state.window, state.mq
        try:
            while not state.pq.dropped:
                offset = await self.offsets.read(mq, ReadType.MEMORY)
                if offset is None or offset - window.persisted < max(1, window.size // 2):
                    return
                try:
                    await self.offsets.persist_acked(mq)  # the value just read: no await in between
                except RocketMQError as exc:
                    self.stats.bump("window_persist_errors")
                    log.debug(
                        "group %s: persisting %s for the commit window failed: %s", self.config.group, mq, exc
                    )
                    if await self.wait_closing(self.config.pull_delay_on_error_s):
                        return
                    continue
                self.stats.bump("window_persists")
                ready = window.acknowledged(offset)
                if self.config.orderly:
                    state.ready.set()
                elif ready and not state.pq.dropped:
                    self._concurrent.submit(state, ready)
        finally:
            window.persisting = False

    async def persist_offsets(self) -> None:
        await self.offsets.persist_all(list(self.queues))
        self.stats.bump("persists")

    # pulling -----------------------------------------------------------------------------------
    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        cfg = self.config
        return (
            pq.count > cfg.pull_threshold_for_queue
            or pq.size_bytes > cfg.pull_threshold_size_for_queue_mib * 1024 * 1024
            or (not cfg.orderly and pq.span > cfg.consume_max_span)
        )

    async def _pull_loop(self, state: QueueState) -> None:
        cfg, pq, mq = self.config, state.pq, state.mq
        loop = asyncio.get_running_loop()
        # orderly clustering queues are pulled only under the broker's lock (broadcasting takes none)
        needs_lock = cfg.orderly and cfg.message_model is MessageModel.CLUSTERING
        while not pq.dropped and not self._closing.is_set():
            state.room.clear()
            sub = self._subs.get(mq.topic) or Subscription(mq.topic, "*")  # it may change meanwhile
            if self._flow_controlled(pq):
                self.stats.bump("flow_control_pauses")
                await state.room.wait()  # consumption or a drop pokes the queue
                continue
            if needs_lock and not pq.locked:
                # Java's pullMessage (orderly): no pull without the broker's lock, look again after
                # pullTimeDelayMillsWhenException. Pulling anyway fills the cache with what the member now
                # holding the lock consumes in order. The renewal that gets the lock back, a drop and
                # close() poke the queue: the wait ends at once then. (The offset is taken from the
                # store once the lock is held, as Java's first locked pull does, in _add_queue.)
                self.stats.bump("pulls_unlocked_waits")
                log.debug("group %s: %s is not locked in the broker; pulling later", cfg.group, mq)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(cfg.pull_delay_on_error_s):
                        await state.room.wait()
                continue
            try:
                addr, committed = await self._pull_target(state)
                asked, sent_at = pq.next_offset, loop.time()
                result = await self.api.pull(
                    addr,
                    cfg.group,
                    mq,
                    pq.next_offset,
                    max_nums=cfg.pull_batch_size,
                    expression=sub.expression,
                    suspend_s=cfg.suspend_s,
                    commit_offset=committed,
                    timeout_s=cfg.pull_timeout_s,
                    sub_version=sub.sub_version,
                    expression_type=sub.expression_type,
                    max_body_bytes=cfg.max_body_bytes,
                )
            except RocketMQError as exc:
                self.stats.bump("pull_errors")
                self._warn(("pull", mq.broker_name), "pull of %s failed: %s", mq, exc)
                await self.wait_closing(cfg.pull_delay_on_error_s)
                continue
            # processPullResult: every answer says which node to pull this queue from next (a slave
            # while this consumer lags into what the master no longer holds in memory, the master
            # again once it catches up). Any id is harmless: one not listed falls back as above.
            state.pull_from = result.suggest_which_broker_id
            if pq.dropped:
                break
            self._count_pull(mq, result, loop.time() - sent_at)
            if result.status is PullStatus.OFFSET_ILLEGAL:
                self._offset_illegal(state, result.next_begin_offset)
                break
            messages = [self._restore_topic(m) for m in result.messages]
            next_offset = result.next_begin_offset
            if result.undecodable or result.corrupt is not None:
                next_offset = await self._set_aside(state, result)
                if pq.dropped:
                    break
                messages = [m for m in messages if m.queue_offset < next_offset]
            self._hand_out(state, messages, next_offset)
            if next_offset < result.next_begin_offset:  # a send-back failed: pull it again in a while
                await self.wait_closing(cfg.pull_delay_on_error_s)
            elif not messages and pq.next_offset == asked:  # nothing new, nothing skipped: was it held?
                await self._pace_empty_pull(loop.time() - sent_at)

    async def _pull_target(self, state: QueueState) -> tuple[str, int | None]:
        """pullKernelImpl: the address of the queue's next pull, the node the broker last suggested (the
        master at first), else a slave or any node listed (a broker whose master is down is consumed
        from its slave); and the offset the pull commits, None for none. ClientError when the routes
        list no node of the broker."""
        mq = state.mq
        found = self._subscribe_addr(mq.broker_name, state.pull_from)
        if found is None:
            raise ClientError(f"broker {mq.broker_name} is not in the routes")
        addr, slave = found
        # Java clears the commit-offset flag of a pull to a slave (whose broker would ignore it); the
        # offset store commits on its own (_offset_addr).
        if slave or self.config.message_model is not MessageModel.CLUSTERING:
            return addr, None
        return addr, await self.offsets.read(mq, ReadType.MEMORY) or None

    def _hand_out(self, state: QueueState, messages: list[MessageExt], next_offset: int) -> None:
        """A pull's messages cached and given to the listener as the commit window allows; the pull
        position moved to ``next_offset``."""
        pq, window = state.pq, state.window
        if pq.put(messages, next_offset) < len(messages):
            # An offset repeated (BrokerApi.pull refuses such an answer; this is the second guard): the
            # listener gets only what the cache took, once, as the window takes offsets once.
            messages = pq.cached(messages)
        committed = pq.committed_offset()
        if (not messages and pq.count == 0) or (window.size and committed >= window.limit):
            # correctTagsOffset: skip what the filter passed over (or what was set aside). Offsets no
            # listener will see move no consumption, so the commit window is persisted forward from here
            # too: else messages past a filtered run of a window's length would wait behind it for good.
            self.offsets.update(state.mq, committed, increase_only=True)
            self.advanced(state, committed)
        if messages:
            self.stats.bump("pulled", len(messages))
            if self.config.orderly:
                state.ready.set()
            elif ready := window.admit(messages):
                self._concurrent.submit(state, ready)

    def _count_pull(self, mq: MessageQueue, result: PullResult, took_s: float) -> None:
        self.stats.bump("pulls")
        # Java counts the pulls that found messages (pullRT, pullTPS); every pull keeps the snapshots going
        self.topic_stats.pulled(mq.topic, len(result.messages), took_s)

    def _offset_illegal(self, state: QueueState, suggested: int) -> None:
        """Java: drop the queue, commit the broker's suggestion, let the rebalance re-add it."""
        cfg, pq, mq = self.config, state.pq, state.mq
        log.warning(
            "group %s: offset %d of %s is illegal; moving to %d", cfg.group, pq.next_offset, mq, suggested
        )
        self.stats.bump("offsets_moved")
        self.offsets.update(mq, suggested, increase_only=False)
        self._drop_and_readd(state)

    def _drop_and_readd(self, state: QueueState) -> None:
        """Drop the queue now (no result of it moves the offset from here) and re-add it in a while, from
        the offset in memory (``_readd_queue``)."""
        state.pq.drop()
        state.poke()  # a pull waiting for room, an orderly turn waiting for messages: see the drop
        task = asyncio.get_running_loop().create_task(self._readd_queue(state.mq))
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        task.add_done_callback(_log_failure)

    async def _set_aside(self, state: QueueState, result: PullResult) -> int:
        """The pull's records that cannot be delivered, one by one in offset order: an undecodable one
        (its body does not inflate within max_body_bytes, or its text does not decode) goes to the
        group's DLQ, as an exhausted message (CONSUMER_SEND_MSG_BACK with delay level -1: the broker
        copies its own stored bytes, so nothing here needs decoding); broadcasting has no DLQ, there it is
        dropped. Each is logged once with its queue and offset and counted (``undecodable``). Returns the
        offset the queue moves to: the pull's next_begin_offset, or the offset of the lowest one that
        could not be sent back (it is pulled again after pull_delay_on_error_s, with what followed it).
        Walked by offset whatever the answer's order (BrokerApi.pull refuses one not ascending; this is
        the second guard): the caller keeps the messages below what this returns, so every undecodable
        one below it must have been sent back."""
        cfg, mq = self.config, state.mq
        if result.corrupt is not None:
            self.stats.bump("corrupt_skipped")
            log.error(
                "group %s: %s offsets %d to %d skipped: the broker's record there is corrupt: %s",
                cfg.group, mq, state.pq.next_offset, result.next_begin_offset - 1, result.corrupt,
            )  # fmt: skip
        for bad in sorted(result.undecodable, key=lambda u: u.message.queue_offset):
            msg = self._restore_topic(bad.message)
            if msg.queue_offset > state.undecodable_seen:  # logged and counted once, however often pulled
                state.undecodable_seen = msg.queue_offset
                self.stats.bump("undecodable")
                log.error(
                    "group %s: message %s at %s offset %d cannot be decoded, %s: %s",
                    cfg.group, msg.msg_id, mq, msg.queue_offset,
                    "dropped (broadcasting)" if cfg.message_model is MessageModel.BROADCASTING
                    else f"sent to {DLQ_PREFIX}{cfg.group}", bad.reason,
                )  # fmt: skip
            if cfg.message_model is MessageModel.BROADCASTING:
                continue
            if not await self.send_back(msg, mq, dead=True):
                self.stats.bump("send_back_failed")
                return msg.queue_offset
            self.stats.bump("undecodable_dead_lettered")
        return result.next_begin_offset

    async def _pace_empty_pull(self, took_s: float) -> None:
        """A pull that brought nothing came back sooner than pull_min_interval_empty_s: the broker did
        not hold it (Java pulls again at once, which against such a broker is a loop); wait the rest."""
        early = self.config.pull_min_interval_empty_s - took_s
        if early > 0:
            self.stats.bump("pulls_empty_early")
            await self.wait_closing(early)

    def _restore_topic(self, msg: MessageExt) -> MessageExt:
        """Messages of the retry topic carry their original topic in RETRY_TOPIC (resetRetryAndNamespace)."""
        original = msg.properties.get(PROPERTY_RETRY_TOPIC)
        if original and msg.topic == RETRY_PREFIX + self.config.group:
            return dataclasses.replace(msg, topic=original)
        return msg


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("consumer task failed", exc_info=task.exception())
