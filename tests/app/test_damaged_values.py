"""One damaged stored value (bit rot, a bug of an older version, a hand edit) met by a background round, a
request or the start: it is logged and skipped (or refused for its own key), and never stops the round,
the others' requests or the start, nor is it taken for something it is not.

Before: one damaged transaction record stopped the coordinator's construction (its stats read the open
index), and every round of resend, check_undecided and the sweep at that record, for ever; one damaged
kept answer stopped every idempotency purge round (the store grew for ever) and its key answered 500 for
ever; a damaged dmq-offsets.json stopped a replica's start until someone deleted it by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from rocksidecar.app.dmq.replication import OFFSETS_FILE, offsets_store
from rocksidecar.app.idempotency import CF_ANSWERS, CF_EXPIRY, COLUMN_FAMILIES, Answer, IdempotencyStore
from rocksidecar.app.request import RequestError
from rocksidecar.app.transactions.coordinator import LocalOutbox, TransactionCoordinator
from rocksidecar.app.transactions.records import (
    CF,
    NOT_CARRIED_OUT,
    OPEN,
    SWEPT,
    UNDECIDED_LOCAL,
    Decision,
    Record,
    TransactionRecords,
)
from rocksidecar.retry import RetryStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.producer.transaction import TransactionState
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.message import StoredMessage
from tests.fakes import FakeWallClock

BAD = "0" * 32  # sorts before GOOD: a round meets the damaged record first
GOOD = "F" * 32


def _local_doc(drop: tuple[str, ...] = (), **fields: object) -> bytes:
    """BAD's record as stored (a local one, committed, not carried out yet), with ``fields`` changed and
    the fields ``drop`` names gone."""
    msg = StoredMessage(BAD, "Orders", b"x", type="Orders", created_ms=1)
    record = Record(BAD, None, 1, message=msg).decided(Decision.COMMIT, 1)
    doc = {**orjson.loads(record.to_value()), **fields}
    return orjson.dumps({k: v for k, v in doc.items() if k not in drop})


# What a damaged record may look like: not JSON at all, a field gone, a decision without its time (a
# resend asserted on it), a local one not carried out without its message (taken as carried out: the
# committed message silently never sent), a message that is not base64, a JSON value not an object.
DAMAGED = {
    "not json": b"\xff\x00{garbage",
    "no createdMs": _local_doc(drop=("createdMs",)),
    "decided without decidedMs": _local_doc(drop=("decidedMs",)),
    "local without its message": _local_doc(drop=("message",)),
    "message not base64": _local_doc(message="!!not base64!!"),
    "not an object": b"[1, 2]",
}


class NoBroker:
    """The local outbox's producer: it never sends a half (the brokers' checks would set ``checker``)."""

    checker: object = None


@dataclass
class Tx:
    clock: FakeWallClock = field(default_factory=FakeWallClock)
    kv: MemoryKV = field(default_factory=lambda: MemoryKV([CF, *RETRY_CFS]))
    asked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.retry = RetryStore(self.kv, now_ms=self.clock.now_ms)

    def coordinator(self) -> TransactionCoordinator:
        async def ask_app(tx_id: str, key: str | None, topic: str) -> TransactionState:
            self.asked.append(tx_id)
            return TransactionState.COMMIT

        outbox = LocalOutbox(self.retry, lambda _type: RetryPolicy((2.0,), 3), undecided_timeout_ms=60_000)
        return TransactionCoordinator(
            TransactionRecords(self.kv), NoBroker(),  # type: ignore[arg-type]
            ask_app, now_ms=self.clock.now_ms, mode="local", outbox=outbox,
        )  # fmt: skip

    def local(self, tx_id: str) -> Record:
        now = self.clock.now_ms()
        return Record(
            tx_id, None, now, message=StoredMessage(tx_id, "Orders", b"x", type="Orders", created_ms=now)
        )

    def damage(self, raw: bytes, kind: bytes) -> None:
        """BAD's record replaced by ``raw``, its open index entry of ``kind`` left as it was."""
        self.kv.write([Put(CF, BAD.encode(), raw), Put(CF, OPEN + BAD.encode(), kind)], sync=True)


async def test_a_damaged_open_record_does_not_stop_the_start() -> None:
    tx = Tx()
    records = TransactionRecords(tx.kv)
    await records.put(tx.local(GOOD))
    tx.damage(DAMAGED["not json"], UNDECIDED_LOCAL)
    c = tx.coordinator()  # before: JSONDecodeError from the stats' read of the open index
    # Counted as the open index counts it (an undecided one nobody can decide), timed only if readable
    assert c.stats.undecided()[0] == 2


@pytest.mark.parametrize("raw", DAMAGED.values(), ids=DAMAGED.keys())
async def test_a_damaged_record_does_not_stop_resend_of_the_others(raw: bytes) -> None:
    tx = Tx()
    c = tx.coordinator()
    await c.records.put(tx.local(GOOD).decided(Decision.COMMIT, tx.clock.now_ms()))  # the process died
    tx.damage(raw, NOT_CARRIED_OUT)
    assert await c.resend() == 1  # before: the round raised at BAD, every time
    assert tx.retry.get(GOOD) is not None
    # The damaged one is left as it is, still listed as open (the admin listing shows it unreadable),
    # never taken as carried out nor spooled
    assert tx.kv.get(CF, BAD.encode()) == raw and tx.kv.get(CF, OPEN + BAD.encode()) == NOT_CARRIED_OUT
    assert tx.retry.get(BAD) is None
    await c.maintain()  # and every later round goes on as well
    assert await c.resend() == 0


async def test_a_damaged_undecided_record_is_neither_asked_about_nor_decided() -> None:
    tx = Tx()
    c = tx.coordinator()
    await c.records.put(tx.local(GOOD))
    raw = _local_doc(drop=("createdMs",), state="none", decidedMs=None)  # undecided, its begin time gone
    tx.damage(raw, UNDECIDED_LOCAL)
    tx.clock.wall_ms += 60_000  # both stale
    assert await c.check_undecided() == 1  # before: KeyError at BAD, no app ever asked
    assert tx.asked == [GOOD]
    assert tx.kv.get(CF, BAD.encode()) == raw and tx.retry.get(BAD) is None


async def test_a_damaged_record_of_an_earlier_version_does_not_stop_the_sweep() -> None:
    tx = Tx()
    unsent = tx.local(GOOD).decided(Decision.COMMIT, tx.clock.now_ms())
    # A store written before the indexes: the records alone, no index entries, not marked swept
    tx.kv.write(
        [Put(CF, GOOD.encode(), unsent.to_value()), Put(CF, BAD.encode(), DAMAGED["not json"])], sync=True
    )
    c = tx.coordinator()
    assert not c.records.swept
    await c.maintain()  # before: JSONDecodeError from the sweep, every round: nothing re-sent ever
    assert tx.retry.get(GOOD) is not None
    assert c.records.swept and tx.kv.get(CF, SWEPT) is not None
    assert tx.kv.get(CF, BAD.encode()) == DAMAGED["not json"]


# --- idempotency -------------------------------------------------------------------------------------
WINDOW_S = 60.0


@pytest.fixture
async def idem() -> AsyncIterator[tuple[IdempotencyStore, MemoryKV, FakeWallClock]]:
    clock = FakeWallClock()
    kv = MemoryKV(list(COLUMN_FAMILIES))
    writer = GroupCommitWriter(kv)
    try:
        yield IdempotencyStore(kv, writer, window_s=WINDOW_S, now_ms=clock.now_ms), kv, clock
    finally:
        await writer.close()


def _kept(key: bytes, raw: bytes, created_ms: int) -> list[Put]:
    return [Put(CF_ANSWERS, key, raw), Put(CF_EXPIRY, b"%013d" % created_ms + key, b"")]


async def sent() -> Answer:
    return 200, {"id": "fresh"}


async def test_a_damaged_answer_does_not_stop_the_purge(
    idem: tuple[IdempotencyStore, MemoryKV, FakeWallClock],
) -> None:
    store, kv, clock = idem
    now = clock.now_ms()
    good = orjson.dumps({"fp": "fp", "created_ms": now + 1, "status": 200, "body": {"id": "x"}})
    kv.write([*_kept(b"bad", b"\xffnot json", now), *_kept(b"good", good, now + 1)], sync=True)
    clock.advance(2 * WINDOW_S)
    assert await store.purge() == 2  # before: JSONDecodeError at the oldest entry, every round
    assert kv.count(CF_ANSWERS) == kv.count(CF_EXPIRY) == 0


ANSWERS = {
    "not json": b"\xffnot json",
    "no created_ms": orjson.dumps({"fp": "fp", "status": 200, "body": {}}),
    "body not an object": orjson.dumps({"fp": "fp", "created_ms": 0, "status": 200, "body": [1]}),
    "status not a number": orjson.dumps({"fp": "fp", "created_ms": 0, "status": "200", "body": {}}),
}


@pytest.mark.parametrize("raw", ANSWERS.values(), ids=ANSWERS.keys())
async def test_a_damaged_answer_is_refused_in_its_window_and_its_key_answered_afresh_after(
    idem: tuple[IdempotencyStore, MemoryKV, FakeWallClock], raw: bytes
) -> None:
    store, kv, clock = idem
    now = clock.now_ms()
    raw = raw.replace(b'"created_ms":0', b'"created_ms":%d' % now)
    kv.write(_kept(b"k", raw, now), sync=True)
    # Whether the first request was carried out is unknown: neither replayed as an answer it is not,
    # nor sent again (a duplicate), but refused with a clear 500
    with pytest.raises(RequestError) as refused:
        await store.run("k", "fp", sent)
    assert refused.value.status == 500 and "damaged" in refused.value.detail
    clock.advance(2 * WINDOW_S)
    await store.purge()  # the window is over: forgotten as any other answer
    assert await store.run("k", "fp", sent) == (200, {"id": "fresh"})


# --- dmq offsets file ---------------------------------------------------------------------------------
async def test_a_damaged_dmq_offsets_file_does_not_stop_the_start(tmp_path: Path) -> None:
    path = tmp_path / OFFSETS_FILE
    path.write_bytes(b'{"offsetTable": {"{\\"brokerName\\": tru')  # cut short
    store = offsets_store(tmp_path)
    await store.load()  # before: ClientError, the replica never started
    # Every queue reads again from the first offset (the inner consumer's consume_from): nothing skipped
    assert store.snapshot() == {}
    # The damaged file is kept for a look, out of the way; the next persist writes a good one
    assert (tmp_path / (OFFSETS_FILE + ".damaged")).read_bytes().startswith(b'{"offsetTable"')
    mq = MessageQueue("inner", "broker-a", 0)
    store.update(mq, 7, increase_only=True)
    await store.persist(mq)
    assert offsets_store(tmp_path).path == path
    again = offsets_store(tmp_path)
    await again.load()
    assert again.snapshot() == {mq: 7}
