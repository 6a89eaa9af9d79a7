"""Result values of sends and pulls."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter

import msgspec

from .codes import ResponseCode
from .message import MessageExt, MessageQueue
from .message_codec import StoredRecord, Undecodable


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    # Degraded successes: the broker stored the message but could not flush or replicate it in time.
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


# The degraded statuses carry the name of their response code.
STATUS_BY_CODE: dict[int, SendStatus] = {
    int(ResponseCode[s.value]) if s is not SendStatus.SEND_OK else ResponseCode.SUCCESS: s for s in SendStatus
}


class SendResult(msgspec.Struct, gc=False):
    """Where a send stored its message(s). Treat it as immutable; not frozen: one per message on the hot
    path, a Struct for its C __init__ (see Message). Holds strings, numbers and a MessageQueue: no
    cycle passes through it, so the cyclic GC need not track it."""

    status: SendStatus
    msg_id: str  # UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # broker-assigned offset id(s)
    queue: MessageQueue
    queue_offset: int
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    attempts: int = 1

    # With queue_offset and offset_msg_id, "where the broker stored it" as the stores name it
    # (storage.status.StoredAtLike): the sidecar answers from a SendResult without copying it. C-level
    # getters, not def properties: read once per message on the hot path, at half the cost.
    broker = property(attrgetter("queue.broker_name"))
    queue_id = property(attrgetter("queue.queue_id"))


class PullStatus(Enum):
    """Each status is named by Java's PullStatus and valued by the response code that answers it."""

    FOUND = ResponseCode.SUCCESS
    NO_NEW_MSG = ResponseCode.PULL_NOT_FOUND
    NO_MATCHED_MSG = ResponseCode.PULL_RETRY_IMMEDIATELY
    OFFSET_ILLEGAL = ResponseCode.PULL_OFFSET_MOVED


PULL_STATUS_BY_CODE: dict[int, PullStatus] = {int(s.value): s for s in PullStatus}


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0
    messages: list[MessageExt] = field(default_factory=list)
    records: list[StoredRecord] = field(default_factory=list)  # instead of messages: BrokerApi.pull
    # Records whose frame is sound but whose body does not inflate (corrupt, or past the reader's limit)
    # or whose text does not decode: not in messages/records, still passed by next_begin_offset. The
    # reader dead-letters them (the push consumer) or skips them, saying so.
    undecodable: list[Undecodable] = field(default_factory=list)
    # A record whose frame itself is corrupt, alone in a pull of one: offsets [start, next_begin_offset)
    # are skipped with it (the reason in ``corrupt``). Set only then: when records preceded the corrupt
    # one, next_begin_offset is the offset after the last of them, so the next pull starts at it.
    corrupt: str | None = None
