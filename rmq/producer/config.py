"""ProducerConfig: plain frozen settings the producer takes (converted from app.config at the edge)."""

from __future__ import annotations

from dataclasses import dataclass

from ..broker import DEFAULT_COMPRESS_OVER_BYTES
from ..codes import DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS
from ..message import DEFAULT_MAX_BODY_BYTES
from .fault import ISOLATION_LATENCY_MS, LATENCY_MAX_MS, NOT_AVAILABLE_MS
from .routes import ROUTE_REFRESH_S
from .selector import SelectorName


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    group: str = "rocksidecar"
    send_timeout_s: float = 3.0  # one budget for a send and all its retries (P5)
    retry_times: int = 2  # extra attempts, each on another broker when one exists
    # Latency fault tolerance (P3). On by default, unlike the Java client: a sidecar that keeps sending
    # to a dead or slow broker turns every request into a timeout before it can fail over.
    fault_tolerance: bool = True
    latency_max_ms: tuple[int, ...] = LATENCY_MAX_MS
    not_available_ms: tuple[int, ...] = NOT_AVAILABLE_MS
    isolation_latency_ms: int = ISOLATION_LATENCY_MS
    # Like the 5.x client's detector: an isolated, unreachable broker is probed this often and comes back
    # as soon as it answers, instead of staying out for the whole isolation (600 s). 0 turns it off.
    recovery_probe_s: float = 1.0  # a refused connect costs next to nothing; waiting costs a late replay
    # Broker codes retried on top of the errors' own flags (P6), e.g. {16} to retry NO_PERMISSION.
    extra_retry_codes: frozenset[int] = frozenset()
    # FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE mean "stored, not yet durable
    # everywhere"; the Java default counts them as sent. True sends again to another broker.
    retry_another_broker_when_not_store_ok: bool = False
    selector: SelectorName = SelectorName.ROUND_ROBIN
    environment_index: int = 0
    zone: str = ""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    compress_over_bytes: int = DEFAULT_COMPRESS_OVER_BYTES
    max_batch_bytes: int = 4 * 1024 * 1024 - 64 * 1024  # the broker's 4 MiB limit, less header room
    max_batch_messages: int = 1000
    default_topic: str = DEFAULT_TOPIC
    default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    route_refresh_s: float = ROUTE_REFRESH_S
    heartbeat_s: float = 30.0
