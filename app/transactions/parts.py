"""The transactions part of a running sidecar, built from Settings: the records in the store's
``transactions`` column family, the half-message producer on the sidecar's client instance (its group
in the heartbeats, the brokers' checks answered), the app's check endpoint and the background round
that re-sends decisions and asks about stale local ones. app.assembly builds it; app.service starts and
stops it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.producer import Producer
from rocksidecar.rmq.producer.transaction import TransactionProducer
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV

from ..config import Settings
from ..http_client import HttpClient
from ..readiness import master_addrs
from ..tracing import msgtrace
from .app_check import AppCheck
from .coordinator import LocalOutbox, OutboxSpool, TransactionCoordinator
from .records import CF, TransactionRecords

CHECK_ANSWER_BYTES = 64 * 1024  # an app's check answer is {"state": ...}

log = logging.getLogger(__name__)
ROUND_S = 5.0  # re-send unacknowledged decisions, ask about stale local ones
# Brokers forget a channel without a heartbeat for 120 s: announce every 30 s, as the client's heartbeat.
ANNOUNCE_EVERY = 6


@dataclass(eq=False)
class Transactions:
    coordinator: TransactionCoordinator  # counts outcomes and undecided ones for /metrics, admin, /ui
    producer: TransactionProducer
    http: HttpClient | None
    rounds: int = 0

    @classmethod
    def build(
        cls,
        s: Settings,
        producer: Producer,
        kv: KV,
        writer: GroupCommitWriter,
        retry: OutboxSpool,
        now_ms: Callable[[], int],
        msg_trace: msgtrace.Dispatcher | None = None,
    ) -> Transactions | None:
        """None when the store lacks the column family (an old store opened read-only on a full disk).
        ``msg_trace``: RocketMQ's message trace, when on: halves and decisions leave its records."""
        if CF not in kv.column_families:
            log.warning("transactions are off: the store has no %r column family yet (read-only?)", CF)
            return None
        tx = TransactionProducer(producer, s.transaction_group)
        if msg_trace is not None:
            tx.hook = msgtrace.TransactionTrace(msg_trace)
        http = ask = None
        if s.transactions_check_endpoint:
            http = HttpClient(max_answer_bytes=CHECK_ANSWER_BYTES)  # {"state": ...}: a small JSON
            ask = AppCheck(s.transactions_check_endpoint, http)
        outbox = LocalOutbox(retry, s.retry_policy, s.transactions_undecided_timeout_s * 1000)
        coordinator = TransactionCoordinator(
            TransactionRecords(kv, writer), tx, ask, now_ms=now_ms, mode=s.transactions_mode, outbox=outbox
        )
        return cls(coordinator, tx, http)

    def start(self) -> None:
        """Before the producer starts: its first heartbeat already announces the group."""
        self.producer.start()

    async def round(self) -> None:
        """The background round: announce the group to every broker (the first round, then every
        ANNOUNCE_EVERY rounds), re-send decisions not carried out, ask about stale local ones."""
        if self.rounds % ANNOUNCE_EVERY == 0:
            await self._announce()
        self.rounds += 1
        await self.coordinator.maintain()

    async def _announce(self) -> None:
        """Heartbeat to every master of the cluster, not only the brokers of routes used so far: a
        restarted sidecar that sends nothing is still asked about the halves it stored before. (Not
        added to the client's broker table: that lists the brokers the producer uses.)"""
        instance = self.producer.producer.instance
        try:
            addrs = master_addrs(await instance.namesrv.get_cluster_info())
        except RocketMQError as exc:
            log.info("transactions: cluster info unavailable (%s); announcing later", exc)
            return
        for addr in sorted(set(addrs.values()) - set(instance.broker_addrs().values())):
            try:  # the ones the client's own heartbeat reaches need no second one
                await instance.heartbeat_to(addr)
            except RocketMQError as exc:
                log.info("transactions: heartbeat to %s failed: %s", addr, exc)

    async def close(self) -> None:
        await self.producer.close()
        if self.http is not None:
            await self.http.close()
