"""The sidecar's parts, each built by one method from Settings, and what the operator sees of them
(metrics, logs, replay on recovery). app.service composes them, in order, and starts and stops them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from rocksidecar.delay import DelayStore
from rocksidecar.delay import keys as delay_keys
from rocksidecar.retry import RetryStore
from rocksidecar.retry import keys as retry_keys
from rocksidecar.retry.recovery import RecoveryReplay, RoundResult
from rocksidecar.rmq import Message
from rocksidecar.rmq.periodic import Periodic, Sleep
from rocksidecar.rmq.producer.coalesce import CoalescingSender
from rocksidecar.rmq.sender import Sender
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV
from rocksidecar.storage.message import StoredMessage
from rocksidecar.storage.reserve import MIB, DiskReserve, ReserveFile
from rocksidecar.storage.rocks import RocksKV

from .api.admin import AdminOps
from .api.grpc import SidecarServicer
from .api.grpc_edge import ENVELOPE_BYTES, SENDS_MESSAGES, MalformedRequests
from .api.grpc_probes import ProbeToken
from .api.guards import Guards
from .api.http import create_app
from .api.operations import EdgeDeps
from .api.servers import GrpcServer, HttpServer, ListenError, split_addr
from .api.ui import UiDeps, counters
from .config import Settings
from .dmq.forward import COLUMN_FAMILIES as FORWARDED_CFS
from .dmq.forward import PURGE_EVERY_S as FORWARD_PURGE_EVERY_S
from .dmq.forward import Forwarder
from .events import OpsEvents
from .history import SAMPLE_EVERY_S, History
from .idempotency import PURGE_EVERY_S, IdempotencyStore
from .localhost import is_loopback
from .lookups import DelayLookup, RetryLookup
from .metrics import (
    CoalesceCollector,
    ConsumerCollector,
    Metrics,
    MsgTraceCollector,
    StateCollector,
    TimedSender,
    TransactionCollector,
)
from .notify import DeadLetterNotifier
from .readiness import Readiness, StoreProbe, disk_draining
from .request import Limits
from .sidecar import Sidecar
from .store_delivery import delivery_loops
from .subscriptions.runner import QueueLag, Subscriptions, close_wait_s
from .topic_allow import TopicAllowList
from .tracing import msgtrace, spans
from .transactions import records as tx_records
from .transactions.admin import transactions_view
from .transactions.grpc import GrpcTransactions
from .transactions.http import transaction_routes
from .transactions.parts import ROUND_S as TX_ROUND_S
from .transactions.parts import Transactions
from .wiring import COLUMN_FAMILIES as SHARED_CFS
from .wiring import REPLAY_BATCH, StartupError, build_client, open_store, start_http, trace_producer

log = logging.getLogger("rocksidecar")
COLUMN_FAMILIES = (*SHARED_CFS, *FORWARDED_CFS, tx_records.CF)
# Batches that only add but still belong to a drain: the stores' progress (floor, clock) and the delay
# store's done markers for what the replay delivered. Everything else that only adds is new work.
DRAIN_CFS = (retry_keys.META_CF, delay_keys.META_CF, delay_keys.DONE_CF, delay_keys.EXPIRY_CF)
WARM_ROUTES_S = 5.0  # the allow-listed topics' routes, before the API listens (SidecarParts._warm_routes)


def limits(s: Settings) -> Limits:
    """What a send may carry, the same for the HTTP and the gRPC API (ROCKSIDECAR_TOPICS: an allow-list)."""
    return Limits(s.max_body_bytes, s.max_delay_ms, topics=TopicAllowList.of(s.topics) if s.topics else None)


class SidecarParts:
    """The builders (``_build_*``, each one part, in the order app.service calls them) and the
    observers of the parts they build."""

    settings: Settings
    metrics: Metrics
    events: OpsEvents
    history: History
    lags: list[QueueLag]  # the last sample, read by /metrics and the status page
    transactions: Transactions | None

    # --- the parts ------------------------------------------------------------------------------
    def _build_client(self, namesrv: tuple[str, ...]) -> None:
        """One client instance (client id, routes, connections, heartbeat) for the producer and any
        consumer the sidecar runs; the brokers' requests on its connections go to it."""
        client = build_client(
            self.settings,
            namesrv,
            on_attempt=self._on_attempt,
            on_send_error=self.metrics.observe_send_error,
            on_broker_state=self._on_broker_state,
            on_route_change=self._on_route_change,
        )
        self.remoting, self.client, self.producer = client.remoting, client.instance, client.producer
        self.namesrv = self.client.namesrv

    def _build_store(self, kv: KV | None) -> None:
        """The store (tests may pass a faulty one), its disk reserve and its group-commit writer."""
        s = self.settings
        # On a full disk the store opens read-only: 503 for new work, reopened once there is space.
        self.kv = kv if kv is not None else open_store(
            Path(s.data_dir), held_hint="is another sidecar running on this ROCKSIDECAR_DATA_DIR?",
            column_families=COLUMN_FAMILIES, read_only_when_full=True, reserve_mb=s.disk_reserve_mb,
        )  # fmt: skip
        # Only for the store opened here: a passed-in one (tests) may not live in data_dir.
        self.disk_reserve = disk_reserve(s, self.kv) if isinstance(self.kv, RocksKV) and kv is None else None
        self.writer = GroupCommitWriter(self.kv, reserve=self.disk_reserve)
        if self.disk_reserve is not None:
            self.disk_reserve.start(getattr(self.kv, "read_only_reason", None))

    def _build_delivery(self, now_ms: Callable[[], int]) -> None:
        """The stores, the API's sender, the sidecar's send path and the loops that redeliver."""
        s = self.settings
        self.notifier = DeadLetterNotifier(
            count=lambda _type: self.metrics.dead_letters.inc(),
            webhook_url=s.dead_letter_webhook,
            log_each=False,  # self.events logs them, throttled per cause
        )
        self.retry = RetryStore(
            self.kv,
            writer=self.writer,
            now_ms=now_ms,
            on_dead_letter=self.events.dead_letter_hook(self.notifier),
        )
        self.delay = DelayStore(self.kv, self.writer, now_ms=now_ms)
        delay_lookup = DelayLookup(self.delay)
        self.idempotency = IdempotencyStore(
            self.kv, self.writer, window_s=s.idempotency_window_s, now_ms=now_ms
        )
        self.forwarder: Forwarder | None = None
        if s.delay_mode == "service":  # delayed messages go to the Rock-DMQ service (app.dmq.forward)
            self.forwarder = Forwarder(
                TimedSender(self.producer, self.metrics.observe_send), self.retry, self.kv, self.writer,
                policy_for=s.retry_policy,
                now_ms=self.retry.now_ms, inner_topic=s.dmq_inner_topic, fallback=delay_lookup,
                on_spooled=self.events.spooled, withdraw=self.retry.withdraw, lead_ms=self.delay.lead_ms,
            )  # fmt: skip
        loops_sender: Sender = self.producer
        self.msg_trace: msgtrace.Dispatcher | None = None
        msgtrace.DISPATCHER = None
        if s.msg_trace:  # RocketMQ's message trace (app.tracing.msgtrace): Pub records of every send
            # Written through a producer of its own (app.wiring.trace_producer): a broker refusing the
            # trace topic must not be isolated for the app's sends. The records name the app's group.
            trace = msgtrace.DISPATCHER = msgtrace.Dispatcher(
                trace_producer(s, self.client), topic=s.msg_trace_topic, group=s.producer_group, owned=True
            )
            self.msg_trace = trace
            self.metrics.add_state(MsgTraceCollector(lambda: (trace.written, trace.failed, trace.dropped)))
            loops_sender = cast(Sender, msgtrace.MsgTraceSender(self.producer, trace))
        # Under the coalescer, so that coalesced sends are recorded a batch at a time (no coroutine each)
        self.sender = self._build_sender(loops_sender)
        traced = spans.ON  # spans of the send path (app.tracing.spans): wrappers only when on
        self.sidecar = Sidecar(
            spans.TracedSender(self.sender, background=False) if traced else self.sender,
            spans.TracedSpool(self.retry) if traced else self.retry,
            policy_for=s.retry_policy,
            delay=spans.TracedSchedule(self.forwarder or self.delay)
            if traced
            else self.forwarder or self.delay,
            lookups=[
                # an inner message spooled in service mode is named by the app's topic and due time
                RetryLookup(self.retry.get, forwarded=self.forwarder.forwarded if self.forwarder else None),
                *([self.forwarder] if self.forwarder else []),
                delay_lookup,
            ],
            canceller=self.forwarder or delay_lookup,
            now_ms=self.retry.now_ms,  # never runs backwards: a clock step cannot make a rung fire early
            on_spooled=self.events.spooled,
            on_sent=self.metrics.observe_send,  # the API's sends, timed inline (no wrapper: the hot path)
            lanes=self.retry,  # a sharding key's messages wait behind its spooled ones (retry.lanes)
        )
        loops_sender = TimedSender(loops_sender, self.metrics.observe_send)  # replays, delay publications
        loops_sender = spans.TracedSender(loops_sender, background=True) if traced else loops_sender
        # Both API edges: delayMs due times by the delay store's clock (a step back must not make them early),
        # a deliverAt moved onto it by its lead over the wall clock (not the step early either). Forwarded to
        # the Rock-DMQ service, a due time goes out as a wall time again (Forwarder.lead_ms).
        self.edge_deps = EdgeDeps(
            self.sidecar, limits(s), s.batch_limit, self.metrics, self.idempotency, self.delay.now_ms,
            lead_ms=self.delay.lead_ms,
        )  # fmt: skip
        self.delay_scheduler, self.replay = delivery_loops(
            loops_sender, self.retry, self.delay, policy_for=s.retry_policy, workers=s.replay_workers,
            batch_max=REPLAY_BATCH, on_published=self._on_delay_published, on_replayed=self._on_replayed,
        )  # fmt: skip
        self.recovery = RecoveryReplay(
            self.retry, self.replay, rate_per_s=s.recovery_replay_rate, on_round=self._on_recovery_round
        )
        self.metrics.add_state(StateCollector(self.producer.fault_table, self._store_stats))

    def _build_transactions(self) -> None:
        """Transactions (issue 29): half messages on the sidecar's client instance, or the local outbox
        into the retry store (settings transactions_*)."""
        self.transactions = Transactions.build(
            self.settings, self.producer, self.kv, self.writer, self.retry, self.retry.now_ms, self.msg_trace
        )
        if self.transactions is not None:
            stats = self.transactions.coordinator.stats
            self.metrics.add_state(TransactionCollector(lambda: stats.outcomes, stats.undecided))

    def _build_sender(self, inner: Sender) -> Sender:
        """The API's single sends go through the coalescer (over ``inner``: the producer, or its message
        trace wrapper); the replay and delay loops batch on their own."""
        if not self.settings.coalesce_sends:
            return inner
        coalescer = CoalescingSender(inner)
        self.metrics.add_state(CoalesceCollector(lambda: (coalescer.batches, coalescer.coalesced)))
        return coalescer

    def _build_subscriptions(self, namesrv: tuple[str, ...]) -> None:
        """Subscriptions (issue 13): one push consumer each, delivering to the app over HTTP."""
        self.subscriptions: Subscriptions | None = None
        self.lags = []
        if not self.settings.subscriptions:
            return
        subs = self.subscriptions = Subscriptions(
            self.settings.subscriptions,
            ";".join(namesrv),
            on_delivery=self.metrics.observe_delivery,
            instance=self.client,  # one heartbeat and one connection per broker for every group
            # an app holding a delivery must not hold the stop past the grace (the rest needs time too)
            close_timeout_s=close_wait_s(self.settings.shutdown_grace_s),
        )
        self.metrics.add_state(
            ConsumerCollector(
                lambda: [
                    (r.subscription, r.topic, r.broker, r.queue_id, r.lag, r.in_flight) for r in self.lags
                ],
                subs.rebalances,
                subs.undecodable,
                subs.operator_actions,
            )
        )

    def _build_http(self) -> None:
        s = self.settings
        admin = AdminOps(
            self.retry, self.delay, self.replay, self.recovery, self.producer.fault_table, self.retry.now_ms,
            str((Path(s.data_dir) / "store").resolve()), lambda: disk_draining(self.disk_reserve),
            transactions=transactions_view(tx.coordinator) if (tx := self.transactions) else None,
        )  # fmt: skip
        self.history = History()
        app = create_app(
            self.edge_deps,
            readiness=self.readiness,
            max_request_bytes=s.max_request_bytes,
            edge=Guards.of(s.auth_token, s.allowed_hosts + bound_hosts(s), s.allowed_origins),
            access_log=s.access_log,
            admin=admin,
            ui=UiDeps(
                admin, self.metrics, self.history, s.auth_token,
                consumer_lag=(lambda: self.lags) if s.subscriptions else None,
            ),
        )  # fmt: skip
        if self.transactions is not None:  # POST /v1/transactions, /{id}:commit, /{id}:rollback
            transaction_routes(
                app, self.transactions.coordinator, limits(s), self.delay.now_ms, self.idempotency
            )
        self.http = HttpServer(
            app, s.http_addr, grace_s=s.shutdown_grace_s, read_timeout_s=s.read_timeout_s,
            max_connections=s.max_connections, refused=self.metrics.connections_refused.inc,
        )  # fmt: skip

    def _grpc_refused_undecoded(self, method: str, status: int) -> None:
        """Count a gRPC request refused before it was decoded (app.api.grpc_edge: not protobuf, or over a
        bound): the call by its status, and a request that sends messages as a rejected message too, as
        HTTP counts a body it cannot parse (once a request)."""
        self.metrics.requests.labels("grpc", method, str(status)).inc()
        if method in SENDS_MESSAGES:
            self.metrics.count_messages("rejected")

    def _grpc_transactions(self) -> GrpcTransactions | None:
        if self.transactions is None:
            return None
        return GrpcTransactions(self.transactions.coordinator, limits(self.settings), self.delay.now_ms)

    def _build_grpc(self) -> None:
        s = self.settings
        servicer = SidecarServicer(
            self.edge_deps,
            auth_token=s.auth_token,
            hubs=self.subscriptions.hubs if self.subscriptions is not None else {},
            transactions=(
                GrpcTransactions(tx.coordinator, limits(s), self.delay.now_ms)
                if (tx := self.transactions)
                else None
            ),
        )
        try:
            self.grpc = GrpcServer(
                servicer,
                s.grpc_addr,
                grace_s=s.shutdown_grace_s,
                # the HTTP API's limits: one message with its envelope, or a whole batch request
                max_receive_bytes=max(s.max_body_bytes + ENVELOPE_BYTES, s.max_request_bytes),
                max_connections=s.max_connections,
                wrappers=[
                    ProbeToken(s.auth_token, without_token=s.probes_without_token),
                    MalformedRequests(self._grpc_refused_undecoded),
                ],
            )
        except ListenError as exc:
            self.kv.close()
            raise StartupError(f"{exc} (set ROCKSIDECAR_GRPC_ADDR)") from exc
        self._readiness = Readiness(
            self.producer,
            self.namesrv,
            StoreProbe(self._store_healthy, self._store_error),
            s.preloaded_topics,
        )

    def background_loops(self, sleep: Sleep = asyncio.sleep) -> list[Periodic]:
        """The sidecar's background work, supervised (rmq.periodic): a failed round is logged (throttled
        when it repeats) and the next one runs."""
        every = functools.partial(Periodic, sleep=sleep, logger=log)
        loops = [
            # every minute, each round going on while it finds expired answers (app.idempotency)
            every("idempotency-purge", PURGE_EVERY_S, self._purge),
            every("log-summaries", self.events.window_s, self.events.flush_round),
            every("status-history", SAMPLE_EVERY_S, self._sample_history, run_first=True),
        ]
        if self.forwarder is not None:  # its own pace: each round goes on where the last one stopped
            loops.append(every("dmq-forwarded-purge", FORWARD_PURGE_EVERY_S, self._purge_forwarded))
        if self.subscriptions is not None:
            loops.append(every("consumer-lag", SAMPLE_EVERY_S, self.sample_lag, run_first=True))
        if self.transactions is not None:  # at start too: decisions a restart must carry out
            loops.append(every("transactions", TX_ROUND_S, self.transactions.round, run_first=True))
        return loops

    # --- starting -----------------------------------------------------------------------------------
    async def _warm_routes(self) -> None:
        """The allow-listed topics' routes, all at once and for WARM_ROUTES_S at most before the API
        listens: a name server that does not answer holds the start-up one request's timeout, not one
        per topic. Not fatal: a route missing is fetched by the first send, and the pinned topics are
        refreshed with the others (/readyz says which has no route meanwhile)."""
        topics = self.settings.preloaded_topics
        self.producer.routes.pin(topics)  # readiness asks about them: kept
        if topics:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WARM_ROUTES_S):
                    await asyncio.gather(
                        *(self.producer.routes.get(t) for t in topics), return_exceptions=True
                    )

    async def _start_http(self) -> None:
        await start_http(self.http, "ROCKSIDECAR_HTTP_ADDR")

    async def _start_subscriptions(self) -> None:
        if self.subscriptions is not None:
            try:
                await self.subscriptions.start()
            except Exception as exc:
                raise StartupError(f"cannot start the subscriptions' consumers: {exc}") from exc

    def _addresses(self) -> dict[str, str]:
        """Where the started sidecar listens and what it uses, for its "started" log line."""
        return {
            "http": f"{self.http.host}:{self.http.port}",
            "grpc": f"{self.grpc.host}:{self.grpc.port}",
            "namesrv": ",".join(self.namesrv.addresses),
            "store": self.settings.data_dir,
        }

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether a send can succeed now, and why not (see app.readiness)."""
        return await self._readiness.check()

    # --- background rounds ------------------------------------------------------------------------
    def sample_history(self) -> None:
        """One sample of what the status page charts (a loop takes one every few seconds)."""
        self.history.sample(time.monotonic(), {**counters(self.metrics), **self._store_stats()})

    async def _sample_history(self) -> None:
        self.sample_history()

    async def sample_lag(self) -> None:
        if self.subscriptions is not None:
            self.lags = await self.subscriptions.lags()

    async def _purge(self) -> None:
        await self.idempotency.purge()

    async def _purge_forwarded(self) -> None:
        if self.forwarder is not None:
            await self.forwarder.purge()

    # --- what the operator sees, and replay on recovery -------------------------------------------
    def _on_attempt(self, broker: str, latency_s: float, ok: bool, message: Message | None) -> None:
        # attempts only: the send latency is one observation per send, all its attempts included
        # (Sidecar.on_sent, TimedSender), not one per attempt
        self.metrics.observe_attempt(broker, ok)

    def _on_broker_state(self, broker: str, state: str, reason: str, backoff_s: float) -> None:
        self.events.broker_state(broker, state, reason, backoff_s)
        if state == "recovered":
            self.recovery.trigger(
                None,
                reason=f"broker {broker} recovered ({reason})",
                healthy=lambda: self.producer.fault.is_available(broker),
            )

    def _on_route_change(self, topic: str, before: tuple[str, ...] | None, after: tuple[str, ...]) -> None:
        self.events.route_changed(topic, before, after)
        if before is None:
            self.recovery.trigger(topic, reason=f"route of {topic} appeared")

    def _on_recovery_round(self, result: RoundResult) -> None:
        if not result.handed_out and not result.stopped_early:
            return  # another trigger's round already took everything: nothing to tell
        log.info(
            "replay on recovery: %d pending messages brought forward (%s)%s",
            result.handed_out,
            "; ".join(result.reasons),
            ", stopped early: the cause is back" if result.stopped_early else "",
            extra={
                "event": "replay_on_recovery",
                "count": result.handed_out,
                "reasons": list(result.reasons),
                "stopped_early": result.stopped_early,
            },
        )

    def _on_replayed(self, outcome: str) -> None:
        self.metrics.replays.labels(outcome).inc()
        self.events.replayed(outcome)

    def _on_delay_published(self, lateness_s: float, msg: StoredMessage) -> None:
        self.metrics.observe_lateness(lateness_s, msg)
        self.events.delay_published(lateness_s)

    # /readyz's view of the store: in drain mode on a full disk writes succeed (acks) but new work gets
    # 503, so the sidecar is not ready.
    def _store_healthy(self) -> bool:
        return disk_draining(self.disk_reserve) is None and self.retry.healthy

    def _store_error(self) -> str | None:
        reserve = self.disk_reserve
        if reserve is not None and reserve.draining:
            return str(reserve.refusal())
        return self.retry.writer.last_error

    def _store_stats(self) -> dict[str, float]:
        st = self.retry.stats()
        # the oldest pending message's first failure (its creation if it never failed: ack=spool), not the
        # next due one's (retry.oldest); the next due time only for records that carry neither
        since = st.oldest_first_failure_ms or st.oldest_due_ms
        # by the retry store's clock, as both times were stamped (not the wall clock: a step back of it
        # would make them look that much younger, for good)
        age = (self.retry.now_ms() - since) / 1000 if since else 0.0
        return {
            "retry_pending": st.pending,
            "retry_oldest_age_seconds": max(age, 0.0),
            "dead_letters": st.dead,
            "delay_scheduled": self.delay.stats().pending,
            "disk_draining": float(disk_draining(self.disk_reserve) is not None),
        }


def bound_hosts(s: Settings) -> tuple[str, ...]:
    """The HTTP listen address as a Host the API answers (a wildcard address names no host)."""
    host = split_addr(s.http_addr)[0]
    return () if host in ("", "0.0.0.0", "::") else (host,)


def warn_if_open(s: Settings) -> None:
    """Config refuses a non-loopback listener without a token unless told to; when told, say so loudly."""
    if s.auth_token:
        return
    for name, addr in (("HTTP", s.http_addr), ("gRPC", s.grpc_addr)):
        if not is_loopback(split_addr(addr)[0]):
            log.warning(
                "SECURITY: the %s API listens on %s without ROCKSIDECAR_AUTH_TOKEN: anyone who can reach "
                "it can send messages (ROCKSIDECAR_ALLOW_REMOTE_WITHOUT_TOKEN is set)",
                name,
                addr,
            )


def disk_reserve(s: Settings, kv: RocksKV | None = None) -> DiskReserve | None:
    if s.disk_reserve_mb == 0:
        return None
    path = Path(s.data_dir) / "reserve"
    relieve = None if kv is None else functools.partial(_flush_all, kv)
    return DiskReserve(ReserveFile(path, s.disk_reserve_mb * MIB), DRAIN_CFS, relieve=relieve)


def _flush_all(kv: RocksKV) -> None:
    for cf in kv.column_families:
        kv.flush(cf)
