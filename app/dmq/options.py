"""DmqOptions: what `rocksidecar dmq` runs with beyond the sidecar's settings (app.dmq.cli fills it)."""

from __future__ import annotations

from dataclasses import dataclass

from .defaults import INTERVAL_S, REFRESH_AFTER_S
from .inner import DEFAULT_GROUP, DEFAULT_INNER_TOPIC
from .marks import DEFAULT_MARKS_TOPIC


@dataclass(frozen=True)
class DmqOptions:
    inner_topic: str = DEFAULT_INNER_TOPIC
    group: str = DEFAULT_GROUP
    http_addr: str = "127.0.0.1:9890"
    instance_name: str | None = None  # None: pid-based, as Java; set it per replica (the pod name)
    consume_concurrency: int = 20
    consume_batch_size: int = 32  # one synced batch per listener call
    persist_interval_s: float = 5.0  # how often inner offsets are committed (Java's default)
    # Replicated mode (README "Rock-DMQ replicas"): every replica's instance name, comma-separated;
    # None: each replica owns what it consumed (the mode before replication).
    replicas: str | None = None
    copies: int | None = None  # replicas holding each message; None: 2 (1 with a single replica)
    marks_topic: str = DEFAULT_MARKS_TOPIC
    presence_interval_s: float = INTERVAL_S  # beats and member-list reads this often (app.dmq.beats)
    # Held messages go to the inner topic again at this age (app.dmq.refresh); keep it below the inner
    # topic's retention (72 h by default). 0: never (a lost volume then relies on the inner topic alone).
    refresh_after_s: float = REFRESH_AFTER_S
