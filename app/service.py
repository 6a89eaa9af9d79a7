"""The composition root: build the producer, the local store, the replay loop and the APIs from Settings,
start them in order, and stop them in reverse on SIGTERM (stop accepting, finish in-flight requests,
flush the store) within the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from rocksidecar import delay
from rocksidecar.delay import DelayStore
from rocksidecar.delay import keys as delay_keys
from rocksidecar.retry import DeadLetterNotifier, RetryStore
from rocksidecar.retry import keys as retry_keys
from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.recovery import RecoveryReplay, RoundResult
from rocksidecar.rmq import BrokerApi, Credentials, NameServerClient, RemotingClient
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.producer import Producer, ProducerConfig, SelectorName
from rocksidecar.rmq.producer.coalesce import CoalescingSender
from rocksidecar.rmq.sender import Sender
from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.errors import StorageError, StoreLockedError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV
from rocksidecar.storage.reserve import MIB, DiskReserve, ReserveFile
from rocksidecar.storage.rocks import RocksKV

from . import idempotency, logs
from .api.admin import AdminOps
from .api.grpc import SidecarServicer
from .api.grpc_edge import MalformedRequests
from .api.guards import Guards
from .api.http import create_app
from .api.servers import GrpcServer, HttpServer, ListenError, split_addr
from .api.ui import UiDeps, counters
from .config import Settings, is_loopback
from .dmq.forward import COLUMN_FAMILIES as FORWARDED_CFS
from .dmq.forward import Forwarder
from .events import OpsEvents
from .history import SAMPLE_EVERY_S, History
from .idempotency import IdempotencyStore
from .lookups import DelayLookup, RetryLookup
from .metrics import CoalesceCollector, ConsumerCollector, Metrics, StateCollector
from .readiness import Readiness, disk_draining
from .request import Limits
from .shutdown import close_delivery
from .sidecar import Sidecar
from .store_delivery import delivery_loops
from .subscriptions.runner import QueueLag, Subscriptions

log = logging.getLogger("rocksidecar")
COLUMN_FAMILIES = (*RETRY_CFS, *idempotency.COLUMN_FAMILIES, *delay.COLUMN_FAMILIES, *FORWARDED_CFS)
PURGE_EVERY_S = 3600.0
ENVELOPE_BYTES = 1024 * 1024  # a message's topic, keys and properties around its body
# Due messages per redelivery call. send_batch splits a call by queue, so 32 over 8 queues made batches of
# 4; 128 makes batches of 16 and replays a backlog (after an outage) about twice as fast (bench/recovery.py).
REPLAY_BATCH = 128


class StartupError(Exception):
    """The sidecar cannot start: an API address is in use, or the store cannot be opened (another
    sidecar holds it). The message is one line for the operator; whatever had started is stopped."""


def tune_gc() -> None:
    """Each request allocates hundreds of short-lived objects. With the default gen-0 threshold (700)
    the cyclic GC runs constantly, and its older generations walk the ~70 000 long-lived objects of the
    frameworks every time. Freeze what start-up created and collect less often: measured +58 % HTTP batch
    throughput and half the p99 latency on the project's machines (bench/RESULTS.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


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


def producer_config(s: Settings) -> ProducerConfig:
    return ProducerConfig(
        group=s.producer_group,
        send_timeout_s=s.send_timeout_ms / 1000,
        retry_times=s.retry_times,
        fault_tolerance=s.fault_tolerance,
        selector=SelectorName(s.queue_selector),
        environment_index=s.environment_index,
        zone=s.zone,
        max_body_bytes=s.max_body_bytes,
    )


class Service:
    """Everything one sidecar process runs. ``start()`` then ``stop()``; or ``async with``."""

    def __init__(
        self,
        settings: Settings,
        *,
        namesrv: tuple[str, ...] | None = None,
        now_ms: Callable[[], int] = wall_ms,
        kv: KV | None = None,
    ) -> None:
        self.settings = s = settings
        self.metrics = Metrics()
        self.events = OpsEvents(late_threshold_s=s.delay_late_log_ms / 1000)
        credentials = Credentials(s.access_key, s.secret_key) if s.access_key else None
        # One client instance (client id, routes, connections, heartbeat) for the producer and any
        # consumer the sidecar runs; the brokers' requests on its connections go to it.
        self.remoting = RemotingClient(
            credentials=credentials,
            on_request=lambda conn, cmd: self.client.on_broker_request(conn, cmd),  # noqa: PLW0108 (made below)
        )
        self.namesrv = NameServerClient(self.remoting, namesrv or s.namesrv)
        producer_cfg = producer_config(s)
        api = BrokerApi(self.remoting, producer_group=s.producer_group)
        self.client = ClientInstance(self.namesrv, api=api, heartbeat_s=producer_cfg.heartbeat_s)
        self.producer = Producer(
            self.namesrv,
            api,
            producer_cfg,
            instance=self.client,
            on_attempt=self._on_attempt,
            on_send_error=self.metrics.observe_send_error,
            on_broker_state=self._on_broker_state,
            on_route_change=self._on_route_change,
        )
        self.kv = kv if kv is not None else _open_store(Path(s.data_dir))  # tests may pass a faulty one
        # Only for the store opened here: a passed-in one (tests) may not live in data_dir.
        self.disk_reserve = disk_reserve(s, self.kv) if isinstance(self.kv, RocksKV) and kv is None else None
        self.writer = GroupCommitWriter(self.kv, reserve=self.disk_reserve)
        if self.disk_reserve is not None:
            self.disk_reserve.start(getattr(self.kv, "read_only_reason", None))
        self.notifier = DeadLetterNotifier(
            count=lambda _type: self.metrics.dead_letters.inc(),
            webhook_url=s.dead_letter_webhook,
            log_each=False,  # self.events logs them, throttled per cause
        )
        self.retry = RetryStore(self.kv, writer=self.writer, now_ms=now_ms, on_dead_letter=self._dead_letter)
        self.delay = DelayStore(self.kv, self.writer, now_ms=now_ms)
        delay_lookup = DelayLookup(self.delay)
        self.idempotency = IdempotencyStore(
            self.kv, self.writer, window_s=s.idempotency_window_s, now_ms=now_ms
        )
        self.forwarder: Forwarder | None = None
        if s.delay_mode == "service":  # delayed messages go to the Rock-DMQ service (app.dmq.forward)
            self.forwarder = Forwarder(
                self.producer, self.retry, self.kv, self.writer, policy_for=s.retry_policy,
                now_ms=self.retry.now_ms, inner_topic=s.dmq_inner_topic, fallback=delay_lookup,
                on_spooled=self.events.spooled,
            )  # fmt: skip
        # The API's single sends go through the coalescer; the replay and delay loops batch on their own.
        self.sender: Sender = self.producer
        if s.coalesce_sends:
            coalescer = self.sender = CoalescingSender(self.producer)
            self.metrics.add_state(CoalesceCollector(lambda: (coalescer.batches, coalescer.coalesced)))
        self.sidecar = Sidecar(
            self.sender,
            self.retry,
            policy_for=s.retry_policy,
            delay=self.forwarder or self.delay,
            lookups=[
                RetryLookup(self.retry.get),
                *([self.forwarder] if self.forwarder else []),
                delay_lookup,
            ],
            canceller=self.forwarder or delay_lookup,
            now_ms=self.retry.now_ms,  # never runs backwards: a clock step cannot make a rung fire early
            on_spooled=self.events.spooled,
        )
        self.delay_scheduler, self.replay = delivery_loops(
            self.producer, self.retry, self.delay, policy_for=s.retry_policy, workers=s.replay_workers,
            batch_max=REPLAY_BATCH, on_published=self._on_delay_published, on_replayed=self._on_replayed,
        )  # fmt: skip
        self.recovery = RecoveryReplay(
            self.retry, self.replay, rate_per_s=s.recovery_replay_rate, on_round=self._on_recovery_round
        )
        self.metrics.add_state(StateCollector(self.producer.fault_table, self._store_stats))
        limits = Limits(s.max_body_bytes, s.max_delay_ms)
        admin = AdminOps(
            self.retry,
            self.delay,
            self.replay,
            self.recovery,
            self.producer.fault_table,
            self.retry.now_ms,
            str((Path(s.data_dir) / "store").resolve()),
            lambda: disk_draining(self.disk_reserve),
        )
        self.history = History()
        app = create_app(
            self.sidecar,
            limits=limits,
            batch_limit=s.batch_limit,
            metrics=self.metrics,
            readiness=self.readiness,
            idempotency=self.idempotency,
            max_request_bytes=s.max_request_bytes,
            edge=Guards.of(s.auth_token, s.allowed_hosts + bound_hosts(s), s.allowed_origins),
            now_ms=self.delay.now_ms,  # due times of delayMs: a clock step back must not make them early
            access_log=s.access_log,
            admin=admin,
            ui=UiDeps(
                admin,
                self.metrics,
                self.history,
                s.auth_token,
                consumer_lag=(lambda: self.lags) if s.subscriptions else None,
            ),
        )
        self.http = HttpServer(app, s.http_addr, grace_s=s.shutdown_grace_s, read_timeout_s=s.read_timeout_s)
        # Subscriptions (issue 13): one push consumer each, delivering to the app over HTTP.
        self.subscriptions: Subscriptions | None = None
        self.lags: list[QueueLag] = []  # the last sample, read by /metrics and the status page
        if s.subscriptions:
            self.subscriptions = Subscriptions(
                s.subscriptions,
                ";".join(namesrv or s.namesrv),
                on_delivery=self.metrics.observe_delivery,
                instance=self.client,  # one heartbeat and one connection per broker for every group
            )
            subs = self.subscriptions
            self.metrics.add_state(
                ConsumerCollector(
                    lambda: [
                        (r.subscription, r.topic, r.broker, r.queue_id, r.lag, r.in_flight) for r in self.lags
                    ],
                    subs.rebalances,
                )
            )
        servicer = SidecarServicer(
            self.sidecar,
            auth_token=s.auth_token,
            now_ms=self.delay.now_ms,
            limits=limits,
            batch_limit=s.batch_limit,
            metrics=self.metrics,
            idempotency=self.idempotency,
            hubs=self.subscriptions.hubs if self.subscriptions is not None else {},
        )
        try:
            self.grpc = GrpcServer(
                servicer,
                s.grpc_addr,
                grace_s=s.shutdown_grace_s,
                # the HTTP API's limits: one message with its envelope, or a whole batch request
                max_receive_bytes=max(s.max_body_bytes + ENVELOPE_BYTES, s.max_request_bytes),
                interceptors=[
                    MalformedRequests(
                        lambda method: self.metrics.requests.labels("grpc", method, "400").inc()
                    )
                ],
            )
        except ListenError as exc:
            self.kv.close()
            raise StartupError(f"{exc} (set ROCKSIDECAR_GRPC_ADDR)") from exc
        self._readiness = Readiness(self.producer, self.namesrv, StoreHealth(self), s.topics)
        self._tasks: list[asyncio.Task[None]] = []

    def _on_attempt(self, broker: str, latency_s: float, ok: bool) -> None:
        self.metrics.observe_attempt(broker, ok)
        self.metrics.send_latency.observe(latency_s)

    # --- what the operator sees, and replay on recovery -------------------------------------------
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

    def _on_delay_published(self, lateness_s: float) -> None:
        self.metrics.delay_lateness.observe(lateness_s)
        self.events.delay_published(lateness_s)

    def _dead_letter(self, letter: DeadLetter) -> None:
        self.events.dead_lettered(letter)
        self.notifier(letter)

    def _store_stats(self) -> dict[str, float]:
        st = self.retry.stats()
        since = st.oldest_first_failure_ms or st.oldest_due_ms  # spooled with ack=spool: never failed yet
        age = (wall_ms() - since) / 1000 if since else 0.0
        return {
            "retry_pending": st.pending,
            "retry_oldest_age_seconds": max(age, 0.0),
            "dead_letters": st.dead,
            "delay_scheduled": self.delay.stats().pending,
            "disk_draining": float(disk_draining(self.disk_reserve) is not None),
        }

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether a send can succeed now, and why not (see app.readiness)."""
        return await self._readiness.check()

    async def start(self) -> None:
        self.events.config(self.settings)
        warn_if_open(self.settings)
        await self.producer.start()
        for topic in self.settings.topics:  # warm routes; an unreachable name server is not fatal
            with contextlib.suppress(Exception):
                await self.producer.routes.get(topic)
        await self.replay.start()  # replays whatever the store holds from before (R6)
        await self.delay_scheduler.start()  # overdue delayed messages first
        try:
            await self.http.start()
        except ListenError as exc:
            raise StartupError(f"{exc} (set ROCKSIDECAR_HTTP_ADDR)") from exc
        await self.grpc.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._purge_loop(), name="idempotency-purge"))
        self._tasks.append(loop.create_task(self._flush_events(), name="log-summaries"))
        self._tasks.append(loop.create_task(self._sample_history(), name="status-history"))
        if self.subscriptions is not None:
            try:
                await self.subscriptions.start()
            except Exception as exc:
                raise StartupError(f"cannot start the subscriptions' consumers: {exc}") from exc
            self._tasks.append(loop.create_task(self._sample_lag(), name="consumer-lag"))
        ready, details = await self.readiness()
        self.events.started(
            ready=ready,
            details=details,
            addresses={
                "http": f"{self.http.host}:{self.http.port}",
                "grpc": f"{self.grpc.host}:{self.grpc.port}",
                "namesrv": ",".join(self.namesrv.addresses),
                "store": self.settings.data_dir,
            },
        )

    def sample_history(self) -> None:
        """One sample of what the status page charts (the task below takes one every few seconds)."""
        self.history.sample(time.monotonic(), {**counters(self.metrics), **self._store_stats()})

    async def sample_lag(self) -> None:
        if self.subscriptions is not None:
            self.lags = await self.subscriptions.lags()

    async def _sample_lag(self) -> None:
        while True:
            try:
                await self.sample_lag()
            except Exception:
                log.exception("consumer lag sample failed")
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def _sample_history(self) -> None:
        while True:
            self.sample_history()
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def _flush_events(self) -> None:
        while True:
            await asyncio.sleep(self.events.window_s)
            self.events.flush()

    async def _purge_loop(self) -> None:
        while True:
            await asyncio.sleep(PURGE_EVERY_S)
            try:
                await self.idempotency.purge()
                if self.forwarder is not None:
                    await self.forwarder.purge()
            except Exception:
                log.exception("idempotency purge failed")

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests, stop replays, flush and close the store."""
        grace = self.settings.shutdown_grace_s
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.subscriptions is not None:  # first: persist offsets and leave the group at once
            await self.subscriptions.close()
        await asyncio.gather(self.http.stop(), self.grpc.stop())
        # The scheduler publishes through the producer and spools into the retry store: stop it first.
        await self.delay_scheduler.close(grace_s=min(grace, 5.0))
        await self.recovery.close()
        await self.replay.close(grace_s=min(grace, 5.0))
        await self.notifier.close()
        await close_delivery(
            self.producer, self.client, self.remoting, self.retry, self.delay, self.writer, self.kv
        )

    async def __aenter__(self) -> Service:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# Batches that only add but still belong to a drain: the stores' progress (floor, clock) and the delay
# store's done markers for what the replay delivered. Everything else that only adds is new work.
DRAIN_CFS = (retry_keys.META_CF, delay_keys.META_CF, delay_keys.DONE_CF, delay_keys.EXPIRY_CF)


def disk_reserve(s: Settings, kv: RocksKV | None = None) -> DiskReserve | None:
    if s.disk_reserve_mb == 0:
        return None
    path = Path(s.data_dir) / "reserve"
    relieve = None if kv is None else functools.partial(_flush_all, kv)
    return DiskReserve(ReserveFile(path, s.disk_reserve_mb * MIB), DRAIN_CFS, relieve=relieve)


def _flush_all(kv: RocksKV) -> None:
    for cf in kv.column_families:
        kv.flush(cf)


class StoreHealth:
    """/readyz's view of the store: in drain mode on a full disk writes succeed (acks) but new work
    gets 503, so the sidecar is not ready."""

    def __init__(self, service: Service) -> None:
        self._service = service

    @property
    def healthy(self) -> bool:
        return disk_draining(self._service.disk_reserve) is None and self._service.retry.healthy

    @property
    def last_error(self) -> str | None:
        reserve = self._service.disk_reserve
        if reserve is not None and reserve.draining:
            return str(reserve.refusal())
        return self._service.retry.writer.last_error


def _open_store(data_dir: Path) -> RocksKV:
    path = data_dir / "store"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        # On a full disk: start read-only, answer 503 for new work, reopen once there is space.
        return RocksKV.open(path, COLUMN_FAMILIES, read_only_when_full=True)
    except StoreLockedError as exc:
        raise StartupError(
            f"the store at {path} is held by another process (is another sidecar running on "
            "this ROCKSIDECAR_DATA_DIR?)"
        ) from exc
    except (StorageError, OSError) as exc:
        raise StartupError(f"cannot open the store at {path}: {exc}") from exc


# An override of the name servers for the process's lifetime (the CLI's embedded devbroker).
NamesrvOverride = Callable[[], contextlib.AbstractAsyncContextManager[tuple[str, ...]]]


@contextlib.asynccontextmanager
async def _namesrv_for(
    settings: Settings, override: NamesrvOverride | None
) -> AsyncIterator[tuple[str, ...]]:
    if override is None:
        yield settings.namesrv
        return
    async with override() as namesrv:
        yield namesrv


async def run(settings: Settings, namesrv_override: NamesrvOverride | None = None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with _namesrv_for(settings, namesrv_override) as namesrv:
        service = Service(settings, namesrv=namesrv)
        try:
            await service.start()
            tune_gc()
            await stop.wait()
            log.info("stopping: draining in-flight work (grace %.0f s)", settings.shutdown_grace_s)
        finally:
            await asyncio.wait_for(service.stop(), settings.shutdown_grace_s + 5.0)
    return 0


def serve(settings: Settings, namesrv_override: NamesrvOverride | None = None) -> int:
    """Run until SIGTERM/SIGINT; the exit code of `rocksidecar serve`."""
    logs.configure(settings.log_level, settings.log_format)
    try:
        import uvloop

        return uvloop.run(run(settings, namesrv_override))
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        return asyncio.run(run(settings, namesrv_override))
