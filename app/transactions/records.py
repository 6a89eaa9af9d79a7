"""The sidecar's synced record of its transactions, one JSON value per transaction id in its own column
family: what was begun (the broker's receipt of the half, or in the local outbox the message itself),
the decision once one is taken, and whether it was carried out (the broker acknowledged the decision,
or the committed message was spooled). A decision is synced before the app hears of it, so that a
restart can carry it out again and a check-back is answered from it rather than from the app."""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass, replace
from typing import Any

import orjson

from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.producer.transaction import HalfReceipt, TransactionState
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV, Delete, Put
from rocksidecar.storage.message import CorruptValueError, StoredMessage, decode, encode

CF = "transactions"
MAX_ID_BYTES = 128


class Decision(enum.Enum):
    NONE = "none"
    COMMIT = "commit"
    ROLLBACK = "rollback"

    @classmethod
    def of(cls, state: TransactionState) -> Decision:
        """The decision an answer of COMMIT or ROLLBACK (from the app or a check) makes."""
        if state is TransactionState.UNKNOWN:
            raise ValueError("UNKNOWN decides nothing")
        return cls.COMMIT if state is TransactionState.COMMIT else cls.ROLLBACK

    @property
    def state(self) -> TransactionState:
        return {
            Decision.COMMIT: TransactionState.COMMIT,
            Decision.ROLLBACK: TransactionState.ROLLBACK,
        }.get(self, TransactionState.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Record:
    id: str
    receipt: HalfReceipt | None  # broker mode: where the half is; None in the local outbox
    created_ms: int
    transaction_key: str | None = None
    decision: Decision = Decision.NONE
    decided_ms: int | None = None
    # Carried out: the broker answered the END_TRANSACTION of the decision (broker mode), or the committed
    # message is in the retry store and a rolled-back one is gone (local outbox).
    acknowledged: bool = False
    message: StoredMessage | None = None  # local outbox: the message, until it is spooled or dropped

    @property
    def local(self) -> bool:
        return self.receipt is None

    @property
    def topic(self) -> str:
        if self.receipt is not None:
            return self.receipt.queue.topic
        return self.message.topic if self.message is not None else ""

    def decided(self, decision: Decision, now_ms: int) -> Record:
        return replace(self, decision=decision, decided_ms=now_ms, acknowledged=False)

    def carried_out(self) -> Record:
        """The decision took effect; a local one no longer needs its message."""
        return replace(self, acknowledged=True, message=None)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "id": self.id,
            "transactionKey": self.transaction_key,
            "state": self.decision.value,
            "acknowledged": self.acknowledged,
            "createdMs": self.created_ms,
            "decidedMs": self.decided_ms,
            "mode": "local" if self.local else "broker",
        }
        if self.receipt is not None:
            r = self.receipt
            doc.update(
                group=r.group, topic=r.queue.topic, broker=r.broker_name, queueId=r.queue.queue_id,
                halfOffset=r.queue_offset, commitLogOffset=r.commit_log_offset, offsetMsgId=r.offset_msg_id,
            )  # fmt: skip
        elif self.message is not None:
            doc["topic"] = self.message.topic
        return doc

    def to_value(self) -> bytes:
        """The stored value: the JSON view, and a local record's message (storage.message's codec)."""
        doc = self.to_json()
        if self.message is not None:
            doc["message"] = base64.b64encode(encode(self.message, {})).decode()
        return orjson.dumps(doc)

    @classmethod
    def from_value(cls, raw: bytes) -> Record:
        doc = orjson.loads(raw)
        receipt = None
        if doc.get("mode", "broker") == "broker":
            receipt = HalfReceipt(
                group=doc["group"],
                msg_id=doc["id"],
                broker_name=doc["broker"],
                queue=MessageQueue(doc["topic"], doc["broker"], int(doc["queueId"])),
                queue_offset=int(doc["halfOffset"]),
                commit_log_offset=int(doc["commitLogOffset"]),
                offset_msg_id=doc["offsetMsgId"],
            )
        message = None
        if doc.get("message") is not None:
            fields, _meta = decode(base64.b64decode(doc["message"]), CorruptValueError)
            message = StoredMessage(*fields)
        return cls(
            id=doc["id"],
            receipt=receipt,
            created_ms=int(doc["createdMs"]),
            transaction_key=doc.get("transactionKey"),
            decision=Decision(doc["state"]),
            decided_ms=doc.get("decidedMs"),
            acknowledged=bool(doc.get("acknowledged")),
            message=message,
        )


def _key(tx_id: str) -> bytes:
    key = tx_id.encode()
    if not key or len(key) > MAX_ID_BYTES:
        raise KeyError(tx_id)
    return key


class TransactionRecords:
    """Records over a KV holding the ``transactions`` column family. With ``writer`` (the sidecar's
    group commit), synced writes of concurrent transactions share one sync, off the event loop."""

    def __init__(self, kv: KV, writer: GroupCommitWriter | None = None) -> None:
        if CF not in kv.column_families:
            raise ValueError(f"the store lacks the {CF!r} column family")
        self._kv = kv
        self._writer = writer

    @property
    def kv(self) -> KV:
        """The store holding the column family (the admin listing pages through it)."""
        return self._kv

    def get(self, tx_id: str) -> Record | None:
        try:
            raw = self._kv.get(CF, _key(tx_id))
        except KeyError:
            return None  # an id no transaction could have
        return Record.from_value(raw) if raw is not None else None

    async def put(self, record: Record, *, sync: bool = True) -> None:
        ops = [Put(CF, _key(record.id), record.to_value())]
        if sync and self._writer is not None:
            await self._writer.write(ops)
        else:
            self._kv.write(ops, sync=sync)

    def forget(self, tx_id: str) -> None:
        self._kv.write([Delete(CF, _key(tx_id))], sync=False)

    def all(self, limit: int = 10_000) -> list[Record]:
        return [Record.from_value(v) for _, v in self._kv.scan(CF, limit=limit)]

    def open(self, limit: int = 10_000) -> list[Record]:
        """Undecided ones and decided ones not carried out yet: what a restart re-sends."""
        return [r for r in self.all(limit) if r.decision is Decision.NONE or not r.acknowledged]

    def purge(self, decided_before_ms: int, limit: int = 10_000) -> int:
        """Forget carried-out transactions decided before ``decided_before_ms``; returns how many."""
        old = [
            Delete(CF, _key(r.id))
            for r in self.all(limit)
            if r.acknowledged and r.decided_ms is not None and r.decided_ms < decided_before_ms
        ]
        if old:
            self._kv.write(old, sync=False)  # a lost purge is done again next time
        return len(old)
