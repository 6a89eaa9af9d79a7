"""What the two composition roots (the sidecar, app.service; a Rock-DMQ replica, app.dmq.service) build
alike from Settings: the store, the client instance and its producer, the delivery loops over them, the
GC tuning, and the one error that stops a start."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocksidecar import delay
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.rmq import RemotingClient
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.message import TOPIC_PATTERN
from rocksidecar.rmq.producer import Producer, ProducerConfig, SelectorName
from rocksidecar.storage.errors import StorageError, StoreLockedError
from rocksidecar.storage.reserve import ReserveTooSmallError, store_write_buffer_bytes
from rocksidecar.storage.rocks import RocksKV

from . import idempotency
from .api.servers import HttpServer, ListenError
from .clients import client_instance
from .config import GROUP_MAX_LEN, Settings

# Due messages per redelivery call. send_batch splits a call by queue, so 32 over 8 queues made batches of
# 4; 128 makes batches of 16 and replays a backlog (after an outage) about twice as fast (bench/recovery.py).
REPLAY_BATCH = 128
# The column families of both processes' stores (the sidecar adds its own; RocksKV opens any existing).
COLUMN_FAMILIES = (*RETRY_CFS, *idempotency.COLUMN_FAMILIES, *delay.COLUMN_FAMILIES)


class StartupError(Exception):
    """The process cannot start: an API address is in use, or the store cannot be opened (another
    process holds it). The message is one line for the operator; whatever had started is stopped."""


async def start_http(server: HttpServer, setting: str) -> None:
    """Start an HTTP server; an address it cannot listen on stops startup, naming the setting to change."""
    try:
        await server.start()
    except ListenError as exc:
        raise StartupError(f"{exc} (set {setting})") from exc


def tune_gc() -> None:
    """Each request allocates hundreds of short-lived objects. With the default gen-0 threshold (700)
    the cyclic GC runs constantly, and its older generations walk the ~70 000 long-lived objects of the
    frameworks every time. Freeze what start-up created and collect less often: measured +58 % HTTP batch
    throughput and half the p99 latency on the project's machines (bench/RESULTS.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets: how the operator (or Kubernetes) asks a process to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def run_process(main: Coroutine[Any, Any, int]) -> int:
    """Run a process's main coroutine on uvloop (a faster loop: less time per request and per due batch)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        return asyncio.run(main)
    return uvloop.run(main)


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


def open_store(
    data_dir: Path,
    *,
    held_hint: str,
    column_families: Sequence[str] = COLUMN_FAMILIES,
    read_only_when_full: bool = False,
    reserve_mb: int = 0,
) -> RocksKV:
    """The store under ``data_dir``; StartupError (naming ``held_hint``) when another process holds it,
    or when a disk reserve of ``reserve_mb`` is too small for what a reopen must write."""
    path = data_dir / "store"
    try:
        write_buffer_bytes = store_write_buffer_bytes(reserve_mb)
    except ReserveTooSmallError as exc:
        raise StartupError(f"ROCKSIDECAR_DISK_RESERVE_MB: {exc}") from exc
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return RocksKV.open(
            path,
            column_families,
            read_only_when_full=read_only_when_full,
            write_buffer_bytes=write_buffer_bytes,
        )
    except StoreLockedError as exc:
        raise StartupError(f"the store at {path} is held by another process ({held_hint})") from exc
    except (StorageError, OSError) as exc:
        raise StartupError(f"cannot open the store at {path}: {exc}") from exc


@dataclass(frozen=True)
class Client:
    """The connections, the client instance over them and the producer that sends through it."""

    remoting: RemotingClient
    instance: ClientInstance
    producer: Producer


def build_client(
    s: Settings, namesrv: Sequence[str], *, instance_name: str | None = None, **hooks: Any
) -> Client:
    """One client instance (client id, routes, connections, heartbeat) for the producer and every
    consumer of the process; ``hooks``: the producer's observers (on_attempt, on_broker_state, ...)."""
    cfg = producer_config(s)
    remoting, instance = client_instance(s, namesrv, heartbeat_s=cfg.heartbeat_s, instance_name=instance_name)
    producer = Producer(instance.namesrv, instance.api, cfg, instance=instance, **hooks)
    return Client(remoting, instance, producer)


TRACE_GROUP_PREFIX = "_INNER_TRACE_PRODUCER-"  # Java's TraceConstants.GROUP_NAME_PREFIX, then a dash


def trace_group(s: Settings) -> str:
    """The message trace producer's group: the prefix and the trace topic, in the characters a group may
    have, and never one of the sidecar's own groups (closing the trace producer unregisters its group,
    which must not take the app's producer or transaction group out of the heartbeat)."""
    group = (TRACE_GROUP_PREFIX + "".join(TOPIC_PATTERN.findall(s.msg_trace_topic)))[:GROUP_MAX_LEN]
    if group in (s.producer_group, s.transaction_group):
        group = group[: GROUP_MAX_LEN - 6] + "-trace"
    return group


def trace_producer(s: Settings, instance: ClientInstance) -> Producer:
    """The message trace's own producer, as Java's AsyncTraceDispatcher has its traceProducer: the
    process's client instance (client id, connections, heartbeat) but its own group, routes and fault
    table, and none of the app producer's observers (metrics, broker events). A broker that refuses the
    trace topic (NO_PERMISSION: an ACL, a topic not writable) or fails its writes is set aside for trace
    writes only: on the app's producer it was isolated for every send, and all brokers with it turned
    /readyz to 503. Fault tolerance as the app's: it steers trace writes to a broker that takes them."""
    cfg = replace(producer_config(s), group=trace_group(s))
    return Producer(instance.namesrv, instance.api, cfg, instance=instance)
