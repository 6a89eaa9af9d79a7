"""One devbroker broker: listener, store, topics, clients and the processors that answer requests, the
dispatch of request codes to them, registration with the in-process name server, fault injection, and
the lifecycle (start, stop and restart on the same port, close)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypedDict, Unpack

from rocksidecar.rmq.clock import wall_ms
from rocksidecar.rmq.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.message import MessageExt
from rocksidecar.rmq.message_codec import pack_host
from rocksidecar.rmq.periodic import Periodic
from rocksidecar.rmq.protocol.frame import RemotingCommand

from .admin_requests import AdminProcessor
from .call_consumer import ConsumerCaller
from .client_manage import ClientManageProcessor
from .clients import ClientRegistry
from .commitlog import DEFAULT_SEGMENT_BYTES, CommitLog
from .faults import Faults
from .filtering import PropertyFilter
from .headers import Reject
from .listener import LOOPBACK, Listener
from .locks import LockProcessor, QueueLocks
from .long_poll import PullHolds
from .namesrv import DEFAULT_CLUSTER, NameServer, Registration
from .offsets import ConsumerOffsets
from .pull import PullProcessor
from .reset_offset import OffsetResets
from .schedule import Schedule
from .send import SendProcessor
from .send_back import SendBackProcessor
from .state import BrokerState
from .store import MessageStore
from .topics import TopicTable
from .transactions import DEFAULT_CHECK_INTERVAL_S, DEFAULT_TIMEOUT_MS, Transactions

log = logging.getLogger(__name__)

BROKER_VERSION = 401  # MQVersion ordinal of 4.9.4, reported in every response (heartbeats read it)
HOUSEKEEPING_INTERVAL_S = 1.0  # flush files, expire silent clients

Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand]]


class BrokerOptions(TypedDict, total=False):
    """What a DevCluster passes through to each of its brokers."""

    cluster: str
    auto_create: bool
    host: str
    now_ms: Callable[[], int]
    clock: Callable[[], float]
    segment_bytes: int
    max_log_bytes: int | None
    enable_property_filter: bool
    transaction_check_interval_s: float  # transactionCheckInterval; <= 0: check only when asked
    transaction_timeout_ms: int  # transactionTimeOut: how old an undecided half gets before a check
    tls: ssl.SSLContext | None  # TLS only on the name server's and brokers' ports (tls.server.mode=enforcing)
    # Multiplies the delay levels of sent-back messages and of a producer's DELAY (schedule.py): 1.0 is
    # RocketMQ's table (1 s ... 2 h, what `rocksidecar devbroker` runs); the default 0 delivers at once,
    # so tests need not wait.
    delay_scale: float


class DevBroker:
    def __init__(
        self,
        name: str,
        namesrv: NameServer,
        *,
        queues: int = 4,
        data_dir: Path | None = None,
        port: int = 0,
        **options: Unpack[BrokerOptions],
    ) -> None:
        cluster = options.get("cluster", DEFAULT_CLUSTER)
        now_ms = options.get("now_ms", wall_ms)
        clock = options.get("clock", time.monotonic)
        self.name = name
        self.cluster = cluster
        self._namesrv = namesrv
        home = data_dir / name if data_dir is not None else None
        if home is not None:
            home.mkdir(parents=True, exist_ok=True)
        self.faults = Faults()
        # enablePropertyFilter: SQL92 subscriptions (flip ``property_filter.enabled`` at run time)
        self.property_filter = PropertyFilter(options.get("enable_property_filter", False))
        self.holds = PullHolds()
        self._log = CommitLog(
            home / "commitlog" if home else None,
            segment_bytes=options.get("segment_bytes", DEFAULT_SEGMENT_BYTES),
            max_bytes=options.get("max_log_bytes"),
        )
        self.store = MessageStore(self._log, now_ms=now_ms, on_append=self.holds.notify)
        self.topics = TopicTable(
            queues=queues,
            auto_create=options.get("auto_create", True),
            path=home / "topics.json" if home else None,
        )
        self.offsets = ConsumerOffsets(home / "consumerOffset.json" if home else None)
        self.schedule = Schedule(
            self.store,
            now_ms=now_ms,
            scale=options.get("delay_scale", 0.0),
            path=home / "delayOffset.json" if home else None,
        )
        self.clients = ClientRegistry(self._notify_ids_changed, clock=clock)
        self.locks = QueueLocks(clock)
        self.transactions = Transactions(
            self.store,
            self.clients,
            now_ms=now_ms,
            timeout_ms=options.get("transaction_timeout_ms", DEFAULT_TIMEOUT_MS),
        )
        self._tx_check_interval_s = options.get("transaction_check_interval_s", DEFAULT_CHECK_INTERVAL_S)
        self._tx_checks = Periodic(
            f"{name}-transaction-check", max(self._tx_check_interval_s, 0.001), self._check_transactions
        )
        host = options.get("host", LOOPBACK)
        self.listener = Listener(
            self._handle,
            port=port,
            host=host,
            on_close=self.clients.connection_closed,
            tls=options.get("tls"),
        )
        self._notify_opaque = itertools.count(1)  # the broker's own requests to its clients
        self._handlers = self._build_handlers(cluster)
        self._housekeeping: asyncio.Task[None] | None = None

    @property
    def addr(self) -> str:
        return self.listener.addr

    def _build_handlers(self, cluster: str) -> dict[int, Handler]:
        send = SendProcessor(
            self.store,
            self.topics,
            self.faults,
            cluster=cluster,
            transactions=self.transactions,
            schedule=self.schedule,
        )
        state = BrokerState(self.store, self.topics, self.clients, self.offsets, self.property_filter)
        pull = PullProcessor(state, self.holds)
        manage = ClientManageProcessor(state)
        admin = AdminProcessor(self.store, self.topics)
        back = SendBackProcessor(self.store, self.topics, self.schedule)
        locks = LockProcessor(self.locks)
        caller = ConsumerCaller(self.clients, self.store.record_at, self.name)
        resets = OffsetResets(state, self.name, lambda: next(self._notify_opaque))
        return {
            RequestCode.SEND_MESSAGE: send.send,
            RequestCode.SEND_MESSAGE_V2: send.send,
            RequestCode.SEND_BATCH_MESSAGE: send.send,
            RequestCode.PULL_MESSAGE: pull.pull,
            RequestCode.QUERY_CONSUMER_OFFSET: manage.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: manage.update_offset,
            RequestCode.HEART_BEAT: manage.heartbeat,
            RequestCode.UNREGISTER_CLIENT: manage.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: manage.consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: manage.check_config,
            RequestCode.UPDATE_AND_CREATE_TOPIC: admin.create_topic,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: admin.search_offset,
            RequestCode.GET_MAX_OFFSET: admin.max_offset,
            RequestCode.GET_MIN_OFFSET: admin.min_offset,
            RequestCode.VIEW_MESSAGE_BY_ID: admin.view_message,
            RequestCode.CONSUMER_SEND_MSG_BACK: back.send_back,
            RequestCode.LOCK_BATCH_MQ: locks.lock,
            RequestCode.UNLOCK_BATCH_MQ: locks.unlock,
            RequestCode.GET_CONSUMER_RUNNING_INFO: caller.call,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: caller.consume_directly,
            RequestCode.END_TRANSACTION: self.transactions.end,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: resets.reset,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: resets.status,
        }

    @property
    def running(self) -> bool:
        return self.listener.running

    async def start(self) -> None:
        """Listen (on the same port as before after a stop) and appear in the name server's routes."""
        if self.running:
            return
        await self.listener.start()
        self.store.store_host = pack_host(self.listener.host, self.listener.port)
        self._namesrv.register(Registration(self.name, self.addr, self.cluster, self.topics))
        self._housekeeping = asyncio.get_running_loop().create_task(self._housekeep_loop())
        self._housekeeping.add_done_callback(self._housekeeping_done)
        self.schedule.start()
        if self._tx_check_interval_s > 0:
            self._tx_checks.start()

    async def stop(self) -> None:
        """Leave the routes, drop every connection and refuse new ones; state is kept for start()."""
        self._namesrv.unregister(self.name)
        self.schedule.stop()
        await self._tx_checks.close()
        await self.listener.stop()
        task, self._housekeeping = self._housekeeping, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.flush()

    async def close(self) -> None:
        """Stop for good: flush and close the files."""
        await self.stop()
        self._log.close()

    def drop_connections(self) -> int:
        """Abort every client connection now; the listener stays up. Returns how many were dropped."""
        return self.listener.drop_connections()

    def messages(self, topic: str, queue_id: int | None = None, *, inflate: bool = True) -> list[MessageExt]:
        """Stored messages of one queue, or of every queue of the topic in queue order (``inflate``:
        store.messages)."""
        if queue_id is not None:
            return self.store.messages(topic, queue_id, inflate=inflate)
        ids = sorted(q for t, q in self.store.queues() if t == topic)
        return [m for q in ids for m in self.store.messages(topic, q, inflate=inflate)]

    def flush(self) -> None:
        self._log.flush()
        self.offsets.flush()
        self.schedule.flush()

    def housekeep(self) -> None:
        """One round of what the background task does every second."""
        for conn in self.clients.scan_expired():
            conn.close()  # as Java's ClientHousekeepingService closes expired channels
        self.flush()

    # internals ----------------------------------------------------------------------------------
    async def _handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            resp = cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        else:
            try:
                resp = await handler(conn, cmd)
            except Reject as exc:
                resp = cmd.response(exc.code, exc.remark)
        resp.version = BROKER_VERSION
        return resp

    async def _check_transactions(self) -> None:
        self.transactions.check_round()

    def _notify_ids_changed(self, conn: Connection, group: str) -> None:
        cmd = RemotingCommand(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            {"consumerGroup": group},
            opaque=next(self._notify_opaque),
            flag=FLAG_ONEWAY,
            version=BROKER_VERSION,
        )
        conn.send(cmd)  # one-way: nothing to wait for, and a closed connection just drops it

    async def _housekeep_loop(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
            try:
                self.housekeep()
            except OSError:  # e.g. a full disk: keep serving from memory, try again next round
                log.exception("broker %s: housekeeping failed", self.name)

    def _housekeeping_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("broker %s: housekeeping stopped", self.name, exc_info=task.exception())
