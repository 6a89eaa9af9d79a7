"""The one pair of conversions between the stores' message and the wire's, and where a send stored it.

retry/, delay/ and storage/ never import rmq, so the crossing lives here: a request (or a wrapped inner
message) becomes a StoredMessage when a store takes it, a stored record (retry or delay) becomes an
rmq.Message when it goes out again, under its original id; a SendResult becomes the stores' StoredAt.
"""

from __future__ import annotations

from rocksidecar.rmq import Message, SendResult
from rocksidecar.storage.message import StoredMessage
from rocksidecar.storage.status import StoredAt


def to_stored(m: Message, *, sharding_key: str | None, type: str, created_ms: int) -> StoredMessage:
    """``m`` as the stores keep it; ``m`` must carry its id (the UNIQ_KEY every send keeps)."""
    assert m.id is not None
    return StoredMessage(m.id, m.topic, m.body, m.tags, tuple(m.keys), dict(m.properties), sharding_key,
                         type, created_ms)  # fmt: skip


def to_wire(s: StoredMessage) -> Message:
    """The message a stored record is sent as, under its original id (its sharding key goes beside)."""
    return Message(s.topic, s.body, tags=s.tags, keys=tuple(s.keys), properties=dict(s.properties), id=s.id)


def stored_at(r: SendResult) -> StoredAt:
    """Where the broker stored a sent message, as the stores keep it."""
    return StoredAt(r.queue.broker_name, r.queue.queue_id, r.queue_offset, r.offset_msg_id)
