"""The sidecar's synced record of its transactions, one JSON value per transaction id in its own column
family: what was begun (the broker's receipt of the half), the decision once one is taken, and whether
the broker acknowledged that decision. A decision is synced before the app hears of it, so that a
restart can re-send it and a check-back is answered from it rather than from the app."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

import orjson

from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.producer.transaction import HalfReceipt, TransactionState
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV, Delete, Put

CF = "transactions"
MAX_ID_BYTES = 128


class Decision(enum.Enum):
    NONE = "none"
    COMMIT = "commit"
    ROLLBACK = "rollback"

    @property
    def state(self) -> TransactionState:
        return {
            Decision.COMMIT: TransactionState.COMMIT,
            Decision.ROLLBACK: TransactionState.ROLLBACK,
        }.get(self, TransactionState.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Record:
    id: str
    receipt: HalfReceipt
    created_ms: int
    transaction_key: str | None = None
    decision: Decision = Decision.NONE
    decided_ms: int | None = None
    acknowledged: bool = False  # the broker answered the END_TRANSACTION of the decision

    def decided(self, decision: Decision, now_ms: int) -> Record:
        return replace(self, decision=decision, decided_ms=now_ms, acknowledged=False)

    def to_json(self) -> dict[str, Any]:
        r = self.receipt
        return {
            "id": self.id,
            "transactionKey": self.transaction_key,
            "state": self.decision.value,
            "acknowledged": self.acknowledged,
            "createdMs": self.created_ms,
            "decidedMs": self.decided_ms,
            "group": r.group,
            "topic": r.queue.topic,
            "broker": r.broker_name,
            "queueId": r.queue.queue_id,
            "halfOffset": r.queue_offset,
            "commitLogOffset": r.commit_log_offset,
            "offsetMsgId": r.offset_msg_id,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Record:
        receipt = HalfReceipt(
            group=doc["group"],
            msg_id=doc["id"],
            broker_name=doc["broker"],
            queue=MessageQueue(doc["topic"], doc["broker"], int(doc["queueId"])),
            queue_offset=int(doc["halfOffset"]),
            commit_log_offset=int(doc["commitLogOffset"]),
            offset_msg_id=doc["offsetMsgId"],
        )
        return cls(
            id=doc["id"],
            receipt=receipt,
            created_ms=int(doc["createdMs"]),
            transaction_key=doc.get("transactionKey"),
            decision=Decision(doc["state"]),
            decided_ms=doc.get("decidedMs"),
            acknowledged=bool(doc.get("acknowledged")),
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
        return Record.from_json(orjson.loads(raw)) if raw is not None else None

    async def put(self, record: Record, *, sync: bool = True) -> None:
        ops = [Put(CF, _key(record.id), orjson.dumps(record.to_json()))]
        if sync and self._writer is not None:
            await self._writer.write(ops)
        else:
            self._kv.write(ops, sync=sync)

    def forget(self, tx_id: str) -> None:
        self._kv.write([Delete(CF, _key(tx_id))], sync=False)

    def all(self, limit: int = 10_000) -> list[Record]:
        return [Record.from_json(orjson.loads(v)) for _, v in self._kv.scan(CF, limit=limit)]

    def open(self, limit: int = 10_000) -> list[Record]:
        """Undecided ones and decided ones the broker has not acknowledged: what a restart re-sends."""
        return [r for r in self.all(limit) if r.decision is Decision.NONE or not r.acknowledged]
