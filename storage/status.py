"""The one vocabulary of where a message stands, shared by the stores and the APIs: its state (Status)
and where a broker stored it (StoredAt). Here, below retry/ and delay/, so both name their states with
these members and keep a StoredAt without importing rmq; app/ answers with the same values, unmapped.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class StoredAtLike(Protocol):
    """What any "where a broker stored it" answers: a StoredAt, and rmq's SendResult as it is (read
    where it is, not copied: one per message on the hot path)."""

    @property
    def broker(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def offset_msg_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class StoredAt:
    """Where a broker stored a message, as its send answered (rmq's SendResult; app.wire converts)."""

    broker: str
    queue_id: int
    queue_offset: int
    offset_msg_id: str  # the broker's id of the stored copy (the message id is the UNIQ_KEY)


class Status(enum.Enum):
    """A message's state: HTTP's status strings, gRPC's Status enum, the rocksidecar_messages metric
    (lower case) and the README's glossary use these names. The retry store reports SPOOLED and DEAD,
    the delay store SCHEDULED, SENT and CANCELLED."""

    SENT = "SENT"  # a broker stored it
    SPOOLED = "SPOOLED"  # synced to the retry store, waiting for its next attempt
    SCHEDULED = "SCHEDULED"  # waiting in the delay store for its due time (or being published right now)
    DEAD = "DEAD"  # left the retry ladder: in the dead letters
    CANCELLED = "CANCELLED"
