"""Producer: select a queue, send, classify the outcome, retry on another broker within one budget.

The behaviour is the Java client's (DefaultMQProducerImpl.sendDefaultImpl + MQFaultStrategy), with
latency fault tolerance on by default and typed errors that say whether a later try may help.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from msgspec.structs import replace

from ..broker import BrokerApi
from ..client_instance import ClientInstance
from ..errors import (
    Attempt,
    ClientError,
    RemotingError,
    RequestTimeout,
    RocketMQError,
    RouteNotFound,
    SendFailed,
    failure_cause,
)
from ..lifecycle import Lifecycle
from ..message import Message, MessageQueue
from ..msgid import local_ip, new_uniq_id
from ..namesrv import NameServerClient
from ..periodic import Periodic
from ..result import SendResult, SendStatus
from ..sender import BatchResults, ShardingKeys
from .batch import BatchSender
from .config import ProducerConfig
from .fault import BrokerState, LatencyFaultTolerance, StateListener
from .publish_info import AttemptFn, TopicPublishInfo
from .routes import RouteListener, TopicRoutes
from .selector import ByShardingKey, QueueSelector, make_selector

log = logging.getLogger(__name__)
# Read once: an Enum member read off its class is a Python-level descriptor on 3.11 (0.1-0.2 us).
_SEND_OK = SendStatus.SEND_OK


def _client_id() -> str:
    ip = ".".join(str(b) for b in local_ip()[:4])
    return f"{ip}@{os.getpid()}#{time.monotonic_ns()}"


def _untried_broker(info: TopicPublishInfo, attempts: list[Attempt]) -> bool:
    """Whether a writable broker of ``info`` has had no attempt of this send yet."""
    tried = {a.broker for a in attempts}
    return any(broker not in tried for broker in info.queues_by_broker)


class Producer(Lifecycle):
    def __init__(
        self,
        namesrv: NameServerClient,
        api: BrokerApi,
        config: ProducerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        client_id: str | None = None,
        on_attempt: Callable[[str, float, bool, Message | None], None] | None = None,
        on_broker_state: StateListener | None = None,
        on_route_change: RouteListener | None = None,
        instance: ClientInstance | None = None,
        on_send_error: Callable[[str, str], None] | None = None,
    ) -> None:
        """``instance``: the client instance (client id, routes, connections, heartbeat) shared with
        other producers and consumers; without, the producer makes its own over ``namesrv``."""
        self.config = cfg = config or ProducerConfig()
        self.api = api
        self._timer = timer
        self._sleep = sleep
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv, api=api, client_id=client_id or _client_id(), heartbeat_s=cfg.heartbeat_s, sleep=sleep
        )
        self.client_id = self.instance.client_id
        # (broker, latency_s, ok, the message sent or a batch's first) after every attempt, for metrics
        # (the message: for an exemplar of its trace)
        self._on_attempt = on_attempt
        self._on_send_error = on_send_error  # (broker, failure_cause(exc)) after a failed attempt
        self.fault = LatencyFaultTolerance(
            cfg.latency_max_ms,
            cfg.not_available_ms,
            isolation_latency_ms=cfg.isolation_latency_ms,
            clock=clock,
            rng=rng,
            on_change=on_broker_state,
        )
        self.routes = TopicRoutes(
            self.instance,
            default_topic=cfg.default_topic,
            default_topic_queue_nums=cfg.default_topic_queue_nums,
            refresh_s=cfg.route_refresh_s,
            sleep=sleep,
            rng=rng,
            on_change=on_route_change,
        )
        self._used = self.routes.used.add
        # The brokers this producer's routes name are the instance's too (heartbeat, fault_table) while
        # they name them: the instance's own table may have dropped the route (past its max_routes).
        self.instance.hold_routes(self.routes.broker_addrs)
        fault = self.fault if cfg.fault_tolerance else None
        self._selector = make_selector(cfg.selector, fault, rng, cfg.environment_index, cfg.zone)
        self._batches = BatchSender(self)
        self._probe_loop = Periodic("producer-recovery-probe", cfg.recovery_probe_s, self._probe, sleep)

    # lifecycle ----------------------------------------------------------------------------------
    async def start(self) -> None:
        self.routes.start()
        self.instance.register_producer(self.config.group)
        self.instance.start()
        if self.config.recovery_probe_s > 0 and self.config.fault_tolerance:
            self._probe_loop.start()

    async def close(self) -> None:
        await self._probe_loop.close()
        await self.routes.close()
        await self.instance.unregister(producer_group=self.config.group)
        self.instance.release_routes(self.routes.broker_addrs)
        if self._own_instance:
            await self.instance.close()

    # sending ------------------------------------------------------------------------------------
    def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> Coroutine[Any, Any, SendResult]:
        """Send one message; SendFailed (with every attempt) when it could not be stored.
        ``validated``: the caller already ran ``msg.validate()`` (skips doing it twice).

        Awaited as an async def is, and like one raises nothing before it is awaited: a plain function
        returning with_retries' coroutine for a validated message, a coroutine layer less (issue 32)."""
        if not validated:
            return self._validate_then_send(msg, sharding_key)
        uniq = msg.id or new_uniq_id()
        selector = self._selector if sharding_key is None else ByShardingKey(sharding_key)
        return self.with_retries(msg.topic, selector, None, uniq, msg)

    async def _validate_then_send(self, msg: Message, sharding_key: str | None) -> SendResult:
        msg.validate(self.config.max_body_bytes)
        return await self.send(msg, sharding_key=sharding_key, validated=True)

    async def send_batch(
        self, messages: Sequence[Message], sharding_keys: ShardingKeys = None, *, validated: bool = False
    ) -> BatchResults:
        """Send many messages grouped by queue with SEND_BATCH_MESSAGE; one outcome per message, in
        order (P8). A bad message fails only itself. ``validated`` as for send()."""
        return await self._batches.send(messages, sharding_keys, validated=validated)

    def selector_for(self, sharding_key: str | None) -> QueueSelector:
        return self._selector if sharding_key is None else ByShardingKey(sharding_key)

    async def with_retries(
        self,
        topic: str,
        selector: QueueSelector,
        attempt: AttemptFn | None,
        what: str,
        message: Message | None = None,
        deadline: float | None = None,
    ) -> SendResult:
        """Run ``attempt`` until it succeeds, a final error stops it, the attempts run out, or the send
        budget is spent. Every attempt goes to another broker than the one that just failed, unless the
        selector pins the message to its queue. ``attempt`` None: each attempt is the SEND_MESSAGE_V2 of
        ``message`` with ``what`` as its id (send's: the broker API called here, without a coroutine of
        its own per attempt, issue 32). ``message`` (a batch's first, with an ``attempt``) is told to
        ``on_attempt``. ``deadline`` (on the producer's timer): the end of a budget already started (a
        batch's, shared by its chunks); None: a budget starts now."""
        cfg, timer = self.config, self._timer
        deadline = timer() + cfg.send_timeout_s if deadline is None else deadline
        attempts: list[Attempt] = []
        last: RocketMQError | None = None
        last_broker: str | None = None
        stored: SendResult | None = None  # the last answer that stored it without SEND_OK (its branch only)
        refresh: asyncio.Task[TopicPublishInfo] | None = None  # the route refresh a stale route started
        info = self.routes.cached(topic)  # publish_info's first step, without its coroutine
        if info is None:
            try:
                info = await self.publish_info(topic, deadline)  # routes.get: marks the topic used
            except RocketMQError as exc:
                raise SendFailed(f"send of {what} to {topic}: no route: {exc}", [], exc) from exc
        else:
            self._used(topic)  # kept in the route cache while sent to (one C call)
        for n in range(1 + cfg.retry_times):
            remaining = deadline - timer()
            if remaining <= 0:
                break
            mq = selector.select(info, None if selector.ordered else last_broker)
            started = timer()
            try:
                addr = info.master_addr(mq.broker_name)
                if addr is None:
                    raise RouteNotFound(f"broker {mq.broker_name} has no master address")
                if attempt is None:
                    assert message is not None
                    result = await self.api.send(addr, mq, message, what, remaining, cfg.default_topic)
                else:
                    result = await attempt(mq, addr, remaining, info)
            except RocketMQError as exc:
                attempts.append(self._failed(mq, timer() - started, exc, message))
                last, last_broker = exc, mq.broker_name
                if exc.refresh_route:  # retriable, all of them
                    # e.g. TOPIC_NOT_EXIST from one broker. Java looks the route up once, before its
                    # attempts, and tries another broker at once: awaiting a refresh here first let a
                    # slow name server spend the whole budget. So one refresh a send runs in the
                    # background while another broker of the known route is tried, and is awaited
                    # (within the budget; at once when done) only when none is left: then the next
                    # try is on the fresh route.
                    refresh = refresh or self.routes.refresh_soon(topic)
                    if selector.ordered or not _untried_broker(info, attempts):
                        info = await self._refreshed(topic, refresh, info, deadline)
                    continue
                if not (exc.retriable or (exc.code is not None and exc.code in cfg.extra_retry_codes)):
                    break
                continue
            latency = timer() - started
            # a stored send's attempt, told (_failed tells a failed one's)
            if self._on_attempt is not None:
                self._on_attempt(mq.broker_name, latency, True, message)
            if cfg.fault_tolerance:
                self.fault.update(mq.broker_name, latency, isolation=False)
            if (
                result.status is not _SEND_OK
                and cfg.retry_another_broker_when_not_store_ok
                and n < cfg.retry_times
            ):
                attempts.append(Attempt(mq.broker_name, mq.queue_id, latency, result.status.value))
                last_broker, stored = mq.broker_name, result
                continue
            return result if n == 0 else replace(result, attempts=n + 1)
        return self._without_send_ok(stored, topic, what, deadline, attempts, last)

    def _without_send_ok(
        self,
        stored: SendResult | None,
        topic: str,
        what: str,
        deadline: float,
        attempts: list[Attempt],
        last: RocketMQError | None,
    ) -> SendResult:
        """The outcome of a send whose attempts ended without a SEND_OK. A broker that stored the message
        but answered another status (FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE: ``stored``, the last such
        answer) has it, whatever failed after it: that answer is the outcome, as in Java's sendDefaultImpl
        (4.9.4: ``if (sendResult != null) return sendResult;`` ahead of every exception). SendFailed would
        have it sent again (a duplicate), or called refused although it is kept."""
        if stored is not None:
            return replace(stored, attempts=len(attempts))  # every attempt, this one too, is in ``attempts``
        raise self._send_failed(topic, what, deadline, attempts, last)

    def _send_failed(
        self, topic: str, what: str, deadline: float, attempts: list[Attempt], last: RocketMQError | None
    ) -> SendFailed:
        """The error of a send whose attempts ran out (``last`` failed last; None: the budget did)."""
        budget = self.config.send_timeout_s
        spent = budget - (deadline - self._timer())
        if last is None:
            last = RequestTimeout(f"send budget of {budget:.3f} s spent")
        return SendFailed(
            f"send of {what} to {topic} failed after {len(attempts)} attempt(s) in {spent:.3f} s: {last}",
            attempts,
            last,
        )

    def _failed(
        self, mq: MessageQueue, latency: float, exc: RocketMQError, message: Message | None = None
    ) -> Attempt:
        """Record an attempt of ``message`` that failed with ``exc`` after ``latency`` s; what it was, for
        the error."""
        broker = mq.broker_name
        if self._on_attempt is not None:
            self._on_attempt(broker, latency, False, message)
        # A ClientError is ours, raised before a byte reached the broker (a request too large to encode,
        # a closed client): it says nothing of the broker, so it neither isolates it nor times it.
        if self.config.fault_tolerance and not isinstance(exc, ClientError):
            if exc.final:
                # A verdict on the message (MESSAGE_ILLEGAL, or refused before it left): the broker is as
                # healthy as its answer was quick. Isolating it (Java does, with its fault tolerance off
                # by default and every message checked before it is sent) let any client that can send a
                # refusable message take every broker out of the selection, and /readyz with them.
                self.fault.update(broker, latency, isolation=False)
            else:
                unreachable = isinstance(exc, RemotingError)
                self.fault.update(broker, latency, isolation=True, unreachable=unreachable, reason=str(exc))
        if self._on_send_error is not None:
            self._on_send_error(broker, failure_cause(exc))
        return Attempt(broker, mq.queue_id, latency, str(exc), exc.code)

    def send_deadline(self) -> float:
        """The end of a send budget starting now, on the timer ``with_retries`` reads."""
        return self._timer() + self.config.send_timeout_s

    async def publish_info(self, topic: str, deadline: float) -> TopicPublishInfo:
        """The topic's route, looked up (a new one marked used) by ``deadline`` at the latest;
        RequestTimeout when the budget runs out first. A cached one is marked used by the send itself
        (with_retries)."""
        info = self.routes.cached(topic)
        if info is not None:
            return info
        try:
            async with asyncio.timeout(max(deadline - self._timer(), 0.001)):
                return await self.routes.get(topic)
        except TimeoutError as exc:  # the budget ran out looking up the route: a RocketMQ error to callers
            raise RequestTimeout(f"route of {topic} not found within the send budget") from exc

    async def _refreshed(
        self, topic: str, refresh: asyncio.Task[TopicPublishInfo], info: TopicPublishInfo, deadline: float
    ) -> TopicPublishInfo:
        """The route ``refresh`` brings by ``deadline``, else ``info`` (the refresh goes on, shielded)."""
        try:
            async with asyncio.timeout(max(deadline - self._timer(), 0.001)):
                return await asyncio.shield(refresh)
        except (RocketMQError, TimeoutError) as exc:
            log.info("route refresh of %s after a send failure did not help: %s", topic, exc)
            return info

    # observability --------------------------------------------------------------------------------
    def fault_table(self) -> list[BrokerState]:
        """Each broker's last latency, remaining back-off and state (for metrics and /status)."""
        return self.fault.snapshot(self.instance.broker_addrs())

    def route_known(self, topic: str) -> bool:
        info = self.routes.cached(topic)
        return info is not None and info.ok

    # background work ------------------------------------------------------------------------------
    async def _probe(self) -> None:
        """Lift the isolation of an unreachable broker as soon as it answers a heartbeat."""
        addrs = self.instance.broker_addrs()
        for broker in self.fault.unreachable_brokers():
            addr = addrs.get(broker)
            if addr is None:
                continue
            try:
                await self.instance.heartbeat_to(addr, timeout_s=1.0)
            except RocketMQError:
                continue
            log.debug("broker %s at %s answers again; ending its isolation", broker, addr)
            self.fault.mark_recovered(broker)
