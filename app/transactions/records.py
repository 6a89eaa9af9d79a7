"""The sidecar's synced record of its transactions, one JSON value per transaction id in its own column
family: what was begun (the broker's receipt of the half, or in the local outbox the message itself),
the decision once one is taken, and whether it was carried out (the broker acknowledged the decision,
or the committed message was spooled). A decision is synced before the app hears of it, so that a
restart can carry it out again and a check-back is answered from it rather than from the app."""

from __future__ import annotations

import base64
import contextlib
import enum
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import orjson

from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.producer.transaction import HalfReceipt, TransactionState
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV, Delete, Put
from rocksidecar.storage.message import CorruptValueError, StoredMessage, decode, encode

log = logging.getLogger(__name__)

CF = "transactions"
MAX_ID_BYTES = 128
MAX_REPORTED = 1_000  # damaged records logged once each (per process); past so many, no more lines


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
    # When it was carried out: a carried-out record is kept KEEP_DECIDED_MS from then (a decision the
    # broker could take only a day later must not be forgotten the moment it is); None before, or in a
    # record an earlier version carried out (its decision time stands in).
    done_ms: int | None = None

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

    def carried_out(self, now_ms: int) -> Record:
        """The decision took effect (at ``now_ms``); a local one no longer needs its message."""
        return replace(self, acknowledged=True, message=None, done_ms=now_ms)

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
        if self.done_ms is not None:
            doc["doneMs"] = self.done_ms
        if self.message is not None:
            doc["message"] = base64.b64encode(encode(self.message, {})).decode()
        return orjson.dumps(doc)

    @classmethod
    def from_value(cls, raw: bytes) -> Record:
        """The record stored as ``raw``; CorruptTransactionError when it is not one (bit rot, a hand edit,
        a bug of an older version), never a record that says something ``raw`` does not."""
        try:
            record = cls._decoded(orjson.loads(raw))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # binascii.Error is a ValueError
            raise CorruptTransactionError(f"{type(exc).__name__}: {exc}") from exc
        if record.decision is not Decision.NONE and record.decided_ms is None:
            raise CorruptTransactionError("decided without its decision time")  # a resend asserted on it
        if record.local and not record.acknowledged and record.message is None:
            # Taken as it reads, a commit would be "carried out" with no message spooled: never sent.
            raise CorruptTransactionError("a local transaction not carried out without its message")
        return record

    @classmethod
    def _decoded(cls, doc: dict[str, Any]) -> Record:
        receipt = None
        if doc.get("mode", "broker") == "broker":
            receipt = HalfReceipt(
                group=_str(doc["group"]),
                msg_id=_str(doc["id"]),
                broker_name=_str(doc["broker"]),
                queue=MessageQueue(_str(doc["topic"]), _str(doc["broker"]), _int(doc["queueId"])),
                queue_offset=_int(doc["halfOffset"]),
                commit_log_offset=_int(doc["commitLogOffset"]),
                offset_msg_id=_str(doc["offsetMsgId"]),
            )
        message = None
        if doc.get("message") is not None:
            fields, _meta = decode(base64.b64decode(doc["message"], validate=True), CorruptValueError)
            message = StoredMessage(*fields)
        key = doc.get("transactionKey")
        return cls(
            id=_str(doc["id"]),
            receipt=receipt,
            created_ms=_int(doc["createdMs"]),
            transaction_key=None if key is None else _str(key),
            decision=Decision(doc["state"]),
            decided_ms=_opt_int(doc.get("decidedMs")),
            acknowledged=bool(doc.get("acknowledged")),
            message=message,
            done_ms=_opt_int(doc.get("doneMs")),
        )


class CorruptTransactionError(CorruptValueError):
    """A stored value of the column family is not a transaction record. The rounds skip it (logged, its
    entries left as they are: the admin listing shows it as unreadable); a request about its id fails."""


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _key(tx_id: str) -> bytes:
    key = tx_id.encode()
    if not key or len(key) > MAX_ID_BYTES or key.startswith(INDEX):
        raise KeyError(tx_id)
    return key


# Beside the records, in the same column family, under keys no id can start with (ids are message ids,
# hex; _key refuses "~"): an index of the open records (undecided, or decided and not carried out), one
# of the carried-out ones by the time they were carried out, and a mark that records written before the
# indexes existed were swept into them. Each is written in the same batch as its record, so the rounds
# read only what they act on: resend and check_undecided page through the open ones (never through the
# decided ones a day keeps), purge through the carried-out ones older than its bound.
INDEX = b"~"
OPEN = b"~o/"  # + id -> the record's kind (below)
DONE = b"~d/"  # + DONE_DIGITS-digit time carried out (Record.done_ms) + id -> b""
DONE_DIGITS = 13  # epoch milliseconds until the year 2286
SWEPT = b"~swept"  # present once every record older than the indexes is in them
UNDECIDED_BROKER, UNDECIDED_LOCAL, NOT_CARRIED_OUT = b"U", b"L", b"D"
OPEN_END = b"~o0"  # above every OPEN key
ANY_OPEN = UNDECIDED_BROKER + UNDECIDED_LOCAL + NOT_CARRIED_OUT
PAGE = 1_000  # index entries read per scan (a round reads a few such pages)


def kind(record: Record) -> bytes | None:
    """The open index's value for ``record``; None: carried out (not open)."""
    if record.decision is Decision.NONE:
        return UNDECIDED_LOCAL if record.local else UNDECIDED_BROKER
    return None if record.acknowledged else NOT_CARRIED_OUT


def _done_prefix(done_ms: int) -> bytes:
    """The carried-out index's keys of decisions carried out at ``done_ms``, ids after it."""
    return DONE + b"%0*d" % (DONE_DIGITS, max(done_ms, 0))


def _done_key(record: Record) -> bytes:
    return _done_prefix(record.done_ms or record.decided_ms or 0) + record.id.encode()


def _index_ops(record: Record, key: bytes) -> list[Put | Delete]:
    k = kind(record)
    if k is not None:
        return [Put(CF, OPEN + key, k)]
    return [Delete(CF, OPEN + key), Put(CF, _done_key(record), b"")]


class TransactionRecords:
    """Records over a KV holding the ``transactions`` column family. With ``writer`` (the sidecar's
    group commit), synced writes of concurrent transactions share one sync, off the event loop."""

    def __init__(self, kv: KV, writer: GroupCommitWriter | None = None) -> None:
        if CF not in kv.column_families:
            raise ValueError(f"the store lacks the {CF!r} column family")
        self._kv = kv
        self._writer = writer
        self._reported: set[bytes] = set()  # damaged records logged already (_readable)
        self._sweep_from: bytes | None = None if kv.get(CF, SWEPT) is not None else b""
        if self._sweep_from is not None and not kv.scan(CF, upper=INDEX, limit=1):
            with contextlib.suppress(StorageError):  # a store that takes no writes: swept by the rounds
                self._mark_swept()  # a new store: nothing to sweep, its indexes are whole from the start

    @property
    def kv(self) -> KV:
        """The store holding the column family (the admin listing pages through it)."""
        return self._kv

    @property
    def swept(self) -> bool:
        """Whether every record is in the indexes (a store written before them is swept by rounds)."""
        return self._sweep_from is None

    def get(self, tx_id: str) -> Record | None:
        """``tx_id``'s record, None if there is none; CorruptTransactionError when it is damaged (a request
        about it fails: it is neither found nor decided)."""
        try:
            raw = self._kv.get(CF, _key(tx_id))
        except KeyError:
            return None  # an id no transaction could have
        return Record.from_value(raw) if raw is not None else None

    async def put(self, record: Record, *, sync: bool = True) -> None:
        key = _key(record.id)
        ops = [Put(CF, key, record.to_value()), *_index_ops(record, key)]
        if sync and self._writer is not None:
            await self._writer.write(ops)
        else:
            self._kv.write(ops, sync=sync)

    def forget(self, tx_id: str) -> None:
        """Drop a record (its carried-out index entry, if any, is dropped when purge reaches it)."""
        key = _key(tx_id)
        self._kv.write([Delete(CF, key), Delete(CF, OPEN + key)], sync=False)

    def all(self, limit: int = 10_000) -> list[Record]:
        """The first ``limit`` records by id (tests and tools; the rounds read the indexes)."""
        return [Record.from_value(v) for _, v in self._kv.scan(CF, upper=INDEX, limit=limit)]

    def open(self, limit: int = 10_000) -> list[Record]:
        """The first ``limit`` open records by id: undecided ones and decided ones not carried out yet."""
        return self.open_scan(b"", limit=limit)[0]

    def open_scan(
        self, after: bytes, upto: bytes | None = None, *, kinds: bytes = ANY_OPEN, limit: int = PAGE
    ) -> tuple[list[Record], bytes | None]:
        """Open records of ``kinds`` with ids in (``after``, ``upto``] (``upto`` None: to the last),
        reading at most ``limit`` index entries, and the id of the last entry read (None: none was left
        in the range). An entry whose record is gone or of another kind now (the sweep raced a
        decision) is corrected, not returned."""
        upper = OPEN_END if upto is None else OPEN + upto + b"\x00"
        rows = self._kv.scan(CF, lower=OPEN + after + b"\x00", upper=upper, limit=limit)
        if not rows:
            return [], None
        wanted = [(key[len(OPEN) :], value) for key, value in rows if value in kinds]
        raws = self._kv.get_many(CF, [key for key, _ in wanted])
        found: list[Record] = []
        fixes: list[Put | Delete] = []
        for (key, value), raw in zip(wanted, raws, strict=True):
            record = self._readable(key, raw) if raw is not None else None
            if raw is None:
                fixes.append(Delete(CF, OPEN + key))
            elif record is None:
                continue  # damaged: not acted on, its entry kept (listed as unreadable, counted as open)
            elif kind(record) != value:
                fixes += _index_ops(record, key)
            else:
                found.append(record)
        if fixes:
            self._kv.write(fixes, sync=False)  # a lost fix is made again on the next read
        return found, rows[-1][0][len(OPEN) :]

    def count_open(self, kinds: bytes) -> int:
        """How many open index entries are of ``kinds``: the index alone, a page at a time."""
        count, lower = 0, OPEN
        while rows := self._kv.scan(CF, lower=lower, upper=OPEN_END, limit=PAGE):
            count += sum(1 for _, value in rows if value in kinds)
            lower = rows[-1][0] + b"\x00"
        return count

    def open_ring(self, start: bytes, kinds: bytes, budget: int) -> Iterator[tuple[list[Record], bytes]]:
        """Pages of open records of ``kinds``: ids after ``start``, then from the first up to ``start``
        (each once), reading at most ``budget`` index entries in all. Each page comes with the id of the
        last entry read: where a round that stops after that page starts the next time."""
        read = 0
        for first, upto in ((start, None), (b"", start)):
            after: bytes | None = first
            while after is not None and read < budget:
                n = min(PAGE, budget - read)
                records, after = self.open_scan(after, upto, kinds=kinds, limit=n)
                if after is not None:
                    read += n
                    yield records, after

    def purge(self, done_before_ms: int, limit: int = 10_000) -> int:
        """Forget transactions carried out before ``done_before_ms`` (the oldest first, at most
        ``limit``); returns how many."""
        rows = self._kv.scan(CF, lower=DONE, upper=_done_prefix(done_before_ms), limit=limit)
        old: list[Delete] = []
        for key, _ in rows:
            old += [Delete(CF, key[len(DONE) + DONE_DIGITS :]), Delete(CF, key)]
        if old:
            self._kv.write(old, sync=False)  # a lost purge is done again next time
        return len(rows)

    def _mark_swept(self) -> None:
        self._kv.write([Put(CF, SWEPT, b"1")], sync=False)  # lost: swept again after a restart, harmlessly
        self._sweep_from = None

    def sweep(self, limit: int = 10_000) -> list[Record]:
        """Index up to ``limit`` more records written before the indexes existed (a store from an
        earlier version); returns the open ones it found without an index entry (those with one were
        indexed when written since: the stats count them already). Marks the store swept once done."""
        if self._sweep_from is None:
            return []
        rows = self._kv.scan(CF, lower=self._sweep_from, upper=INDEX, limit=limit)
        # A damaged one is left unindexed (its kind is unknown): the listing of all records shows it
        readable = [(key, r) for key, v in rows if (r := self._readable(key, v)) is not None]
        entries = self._kv.get_many(CF, [OPEN + key for key, _ in readable])
        ops: list[Put | Delete] = []
        for key, record in readable:
            ops += _index_ops(record, key)
        done = len(rows) < limit
        if done:
            ops.append(Put(CF, SWEPT, b"1"))
        if ops:
            self._kv.write(ops, sync=False)  # lost: swept again after a restart, the same entries
        self._sweep_from = None if done else rows[-1][0] + b"\x00"
        return [
            r
            for (_, r), entry in zip(readable, entries, strict=True)
            if entry is None and kind(r) is not None
        ]

    def _readable(self, key: bytes, raw: bytes) -> Record | None:
        """The record stored as ``raw`` under ``key``; None when it is damaged, logged once per record (a
        round every few seconds meets it again). The rounds skip it rather than stop at it for ever (or
        the start, whose stats read the open index): it is never taken as decided, undecided or carried
        out, and left as it is for the operator (the admin listing shows it as unreadable, with why);
        a request about its id fails (get raises)."""
        try:
            return Record.from_value(raw)
        except CorruptTransactionError as exc:
            if key not in self._reported and len(self._reported) < MAX_REPORTED:
                self._reported.add(key)
                log.error(
                    "transaction %s: its stored record is damaged, skipped by the rounds: %s",
                    key.decode(errors="replace"), exc,
                )  # fmt: skip
            return None
