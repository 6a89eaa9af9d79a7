"""`rocksidecar dmq`: the Rock-DMQ service. It consumes the inner topic into its own delay store and
publishes due messages through the producer; what fails to publish goes to its retry store and is
replayed, as in the sidecar (the same delivery loops, app.store_delivery.delivery_loops).

Each replica keeps what it stored: after a rebalance moves an inner queue away, the messages this replica
already synced (and whose offsets it committed) stay in its store and it publishes them when due. The new
owner starts at the committed offset, so it never sees them: the inner topic's offset is the hand-over
point, not the store. Hence each replica needs its own persistent volume; a lost volume loses the
messages it held that were not yet due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge

from rocksidecar.delay import DelayStore
from rocksidecar.retry import RetryStore
from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.store import DeadLetterHook
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, MessageModel, PushConsumer
from rocksidecar.rmq.message_codec import MAX_BODY_BYTES
from rocksidecar.rmq.periodic import Periodic
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV

from .. import logs
from ..api.guards import Guards
from ..api.servers import HttpServer
from ..config import Settings
from ..delivery_policy import BEHIND
from ..events import OpsEvents
from ..metrics import Metrics, StateCollector, zeroed_counter
from ..notify import DeadLetterNotifier
from ..readiness import Readiness, StoreProbe
from ..shutdown import close_delivery, close_stores, exit_now, start_unless_stopped, stop_within
from ..store_delivery import delivery_loops
from ..topic_allow import TopicAllowList
from ..wiring import (
    REPLAY_BATCH,
    build_client,
    open_store,
    run_process,
    start_http,
    stop_on_signals,
    tune_gc,
)
from .consume import InnerListener
from .http import create_app
from .inner import Reject, Rules
from .options import DmqOptions
from .replicas import ReplicaSet
from .replication import Replication

log = logging.getLogger("rocksidecar.dmq")


class SpoolLoggingRetryStore(RetryStore):
    """The retry store, telling ``on_spooled`` of each message spooled after a failed publish. Here the
    publishes that fail spool (app.store_delivery), and the operator sees them as the sidecar's spools
    (OpsEvents.spooled). A due message held behind its key's lane (lastError BEHIND) was never tried: it
    is not told, as the sidecar tells none it holds (Sidecar._spool_group_behind)."""

    def __init__(
        self,
        kv: KV,
        *,
        writer: GroupCommitWriter,
        on_spooled: Callable[[RetryRecord], None],
        on_dead_letter: DeadLetterHook,
    ) -> None:
        super().__init__(kv, writer=writer, on_dead_letter=on_dead_letter)
        self._on_spooled = on_spooled

    async def spool_many(self, records: Sequence[RetryRecord], due_ms: int | None = None) -> list[bytes]:
        keys = await super().spool_many(records, due_ms)
        for record in records:
            if record.last_error != BEHIND:
                self._on_spooled(record)
        return keys


class DmqService:
    def __init__(
        self,
        settings: Settings,
        options: DmqOptions,
        *,
        namesrv: tuple[str, ...] | None = None,
        kv: KV | None = None,
    ) -> None:
        self.settings = s = settings
        self.options = o = options
        self.metrics = Metrics()
        r = self.metrics.registry
        self.inner = Counter(
            "rocksidecar_dmq_inner_messages", "Inner messages consumed, by outcome.", ["outcome"], registry=r
        )
        self.rejected = zeroed_counter(
            "rocksidecar_dmq_inner_rejected", "Inner messages skipped, by reason.", "reason", Reject, r
        )
        self.owned_queues = Gauge(
            "rocksidecar_dmq_owned_queues", "Inner queues this replica consumes (its share of the load).",
            registry=r,
        )  # fmt: skip
        addresses = namesrv or s.namesrv
        # One client instance for the publishing producer and the inner consumer: one client id, one
        # heartbeat and one connection per broker, as in the sidecar.
        client = build_client(
            s,
            addresses,
            instance_name=o.instance_name,
            on_attempt=lambda broker, _lat, ok, _msg: self.metrics.observe_attempt(broker, ok),
        )
        self.remoting, self.client, self.producer = client.remoting, client.instance, client.producer
        self.kv = (
            kv if kv is not None else open_store(Path(s.data_dir), held_hint="one dmq replica per store")
        )
        self.writer = GroupCommitWriter(self.kv)
        # Spools and dead letters are logged, throttled per cause, and dead letters notified, as in the
        # sidecar (app.service).
        self.events = OpsEvents(late_threshold_s=s.delay_late_log_ms / 1000)
        self._summaries = Periodic("log-summaries", self.events.window_s, self.events.flush_round, logger=log)
        self.notifier = DeadLetterNotifier(
            count=lambda _type: self.metrics.dead_letters.inc(),
            webhook_url=s.dead_letter_webhook,
            log_each=False,
        )
        self.delay = DelayStore(self.kv, self.writer)
        replicas = (
            ReplicaSet.parse(o.replicas, o.instance_name or "", o.copies) if o.replicas is not None else None
        )
        self.replication = (
            Replication(
                replicas,
                o,
                instance=self.client,
                producer=self.producer,
                delay=self.delay,
                registry=r,
                namesrv=";".join(addresses),
                data_dir=Path(s.data_dir),
            )
            if replicas is not None
            else None
        )
        self.retry = SpoolLoggingRetryStore(
            self.kv,
            writer=self.writer,
            on_spooled=self.events.spooled,
            on_dead_letter=self._dead_letter_hook(),
        )
        self.scheduler, self.replay = delivery_loops(
            self.producer, self.retry, self.delay, policy_for=s.retry_policy, workers=s.replay_workers,
            batch_max=REPLAY_BATCH, on_published=self.metrics.observe_lateness,
            on_replayed=lambda outcome: self.metrics.replays.labels(outcome).inc(),
            # Replicated: a publish that was spooled is marked once the replay has a broker store it (or
            # once it is dead-lettered: _dead_letter_hook)
            on_delayed_sent=self.replication.replayed if self.replication is not None else None,
        )  # fmt: skip
        self.listener = InnerListener(
            self.delay,
            Rules(s.max_delay_ms, TopicAllowList.of(s.dmq_topics)),
            count=lambda outcome, n: self.inner.labels(outcome).inc(n),
            rejected=lambda reason: self.rejected.labels(reason.value).inc(),
            holds=replicas.holds if replicas is not None else lambda _id: True,
        )
        if self.replication is not None:
            self.replication.attach(self.scheduler)
        self.consumer = PushConsumer(
            ConsumerConfig(
                group=o.group,
                # Replicated: every replica reads every queue, from its own offsets (on its volume).
                message_model=MessageModel.BROADCASTING if replicas else MessageModel.CLUSTERING,
                consume_from=ConsumeFrom.FIRST_OFFSET,  # a new group must not skip what was sent before
                instance_name=o.instance_name,
                consume_concurrency=o.consume_concurrency,
                consume_batch_size=o.consume_batch_size,
                persist_interval_s=o.persist_interval_s,
                # the inner topic carries bodies the sidecars accepted (max_body_bytes): never less
                max_body_bytes=max(MAX_BODY_BYTES, s.max_body_bytes),
                # A batch fails only when the store failed (a full disk refuses schedules until twice the
                # reserve is free: hours, maybe). Giving up would commit the offset past inner messages
                # (or marks) never stored (broadcasting), or dead-letter them after 16 send-backs
                # (clustering, ~4.8 h): retried here until the store takes them, the queue held.
                retry_locally_forever=True,
            ),
            ";".join(addresses),
            self.listener if self.replication is None else self.replication.listener(self.listener),
            instance=self.client,  # signed like the producer's: the instance's connections carry the ACL
        )
        if self.replication is not None:
            self.consumer.offsets = self.replication.offsets
            self.consumer.subscribe(o.marks_topic)
        self.consumer.subscribe(o.inner_topic)
        self.owned_queues.set_function(lambda: sum(mq.topic == o.inner_topic for mq in self.consumer.queues))
        self.metrics.add_state(StateCollector(self.producer.fault_table, self._store_stats))
        self._readiness = Readiness(
            self.producer,
            self.client.namesrv,
            StoreProbe(lambda: self.delay.healthy, lambda: self.writer.last_error),
            (),
        )
        guards = Guards.of("", s.allowed_hosts, s.allowed_origins)  # serve's Host and Origin names too
        self.http = HttpServer(
            create_app(self.metrics.registry, self.ready, guards), o.http_addr, grace_s=s.shutdown_grace_s,
            max_connections=s.max_connections, refused=self.metrics.connections_refused.inc,
        )  # fmt: skip

    def _dead_letter_hook(self) -> DeadLetterHook:
        """Dead letters logged and notified; replicated, a delayed message's also marked (its publish
        spooled, then dead-lettered: Replication.dead_lettered), so the other holders drop their copies."""
        notify = self.events.dead_letter_hook(self.notifier)
        rep = self.replication
        if rep is None:
            return notify

        def dead_lettered(letter: DeadLetter) -> None:
            rep.dead_lettered(letter)
            notify(letter)

        return dead_lettered

    def _store_stats(self) -> dict[str, float]:
        return {
            "retry_pending": self.retry.stats().pending,
            "delay_scheduled": self.delay.stats().pending,
        }

    async def ready(self) -> tuple[bool, dict[str, Any]]:
        """serve's readiness (store, name server, brokers), and the service's own: its scheduler runs and
        its inner consumer has started."""
        ok, details = await self._readiness.check()
        reasons = [details["reason"]] if not ok else []
        if self.scheduler.failure is not None:
            reasons.append(f"the scheduler failed: {self.scheduler.failure}")
        if not self.consumer.started:
            reasons.append("the inner topic's consumer has not started")
        rep = self.replication
        if rep is not None:
            details["replica"] = {
                "converged": rep.converged,
                "backlog": rep.convergence.backlog,
                "publishers": sorted(rep.presence.live),
            }
            if not rep.converged:
                reasons.append(
                    f"converging: up to {rep.convergence.backlog} inner and marks messages to read"
                )
        if reasons:
            details["reason"] = "; ".join(reasons)
        return not reasons, details

    async def start(self) -> None:
        self._summaries.start()
        await self.producer.start()
        await self.replay.start()
        await self.scheduler.start()  # overdue messages of this replica's store first
        await start_http(self.http, "ROCKSIDECAR_DMQ_HTTP_ADDR")
        await self.consumer.start()
        if self.replication is not None:
            await self.replication.start((self.options.inner_topic, self.options.marks_topic))
        log.info(
            "dmq started: inner topic %s, group %s, http %s:%d",
            self.options.inner_topic,
            self.options.group,
            self.http.host,
            self.http.port,
        )

    async def stop(self) -> None:
        """Consumer first (it persists offsets of what was stored), then the publishing side."""
        grace = min(self.settings.shutdown_grace_s, 5.0)
        await self.consumer.close()
        await self.http.stop()
        await self.scheduler.close(grace_s=grace)
        if self.replication is not None:
            await self.replication.stop()
        await self.replay.close(grace_s=grace)
        await self._summaries.close()
        self.events.flush()
        await self.notifier.close()
        await close_delivery(
            self.producer, self.client, self.remoting, self.retry, self.delay, self.writer, self.kv
        )

    async def close_store(self) -> None:
        """What a stop cut short must still close (app.shutdown.stop_within)."""
        await close_stores(self.retry, self.delay, self.writer, self.kv, anyway=True)


async def run(settings: Settings, options: DmqOptions) -> int:
    """0 once stopped (SIGTERM, SIGINT), during start-up too; 1 when stopping overran the grace + 10 s."""
    stop = stop_on_signals()
    service = DmqService(settings, options)
    try:
        if await start_unless_stopped(service.start(), stop):
            tune_gc()  # as the sidecar: fewer, shorter collections (the GC pauses were lateness spikes)
            await stop.wait()
        else:
            log.info("stopping during start-up: what started is stopped")
    finally:
        stopped = await stop_within(
            service.stop(), settings.shutdown_grace_s + 10.0, service.close_store, exit_now
        )
    return 0 if stopped else 1


def serve(settings: Settings, options: DmqOptions) -> int:
    logs.configure(settings.log_level, settings.log_format)
    return run_process(run(settings, options))
