"""Review of the transactions' internal state (s30): counts that drift from the records, and a degraded
half delivered twice in mode auto."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from rocksidecar.app.transactions import observed
from rocksidecar.app.transactions.coordinator import LocalOutbox, TransactionCoordinator
from rocksidecar.app.transactions.records import CF, OPEN, SWEPT, Decision, TransactionRecords
from rocksidecar.retry import RetryStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq import Message, MessageExt, SendFailed
from rocksidecar.rmq.broker import TRANSACTION_ROLLBACK_TYPE
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.producer.transaction import (
    CheckRequest,
    HalfReceipt,
    TransactionProducer,
    TransactionState,
)
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.storage.errors import StorageError, UnsyncedError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Delete, Op
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock
from tests.rmq.producer.harness import Harness

POLICY = RetryPolicy((2.0, 10.0), 5)


class NoBroker:
    """A TransactionProducer no half reaches (the local outbox never calls it)."""

    checker = None

    async def send_half(self, msg: Message, *, sharding_key: str | None = None) -> HalfReceipt:
        raise SendFailed("no broker", [], None)


class QueuedWriter(GroupCommitWriter):
    """The group commit, telling the test when a synced write is queued (its caller awaits the batch)."""

    def __init__(self, kv: MemoryKV) -> None:
        super().__init__(kv)
        self.queued = asyncio.Event()

    async def write(self, ops: Sequence[Op], *, lazy: bool = False) -> None:
        self.queued.set()  # the caller goes on into super().write, up to awaiting its batch
        await super().write(ops, lazy=lazy)


def _local(
    kv: MemoryKV,
    clock: FakeWallClock,
    writer: GroupCommitWriter | None = None,
    answers: dict[str, TransactionState] | None = None,
) -> TransactionCoordinator:
    async def ask_app(tx_id: str, key: str | None, topic: str) -> TransactionState:
        return (answers or {}).get(tx_id, TransactionState.UNKNOWN)

    outbox = LocalOutbox(RetryStore(kv, now_ms=clock.now_ms), lambda _t: POLICY, undecided_timeout_ms=60_000)
    return TransactionCoordinator(
        TransactionRecords(kv, writer), NoBroker(), ask_app,  # type: ignore[arg-type]
        now_ms=clock.now_ms, mode="local", outbox=outbox,
    )  # fmt: skip


async def test_decisions_past_max_tracked_undecided_are_still_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TransactionStats says the undecided ones past MAX_TRACKED are "counted, not timed". They are not
    counted at all: the undecided gauge stops at MAX_TRACKED, and a decision of one begun past it is
    not counted in rocksidecar_transactions_total either (decided() finds it untracked)."""
    monkeypatch.setattr(observed, "MAX_TRACKED", 2)
    clock = FakeWallClock()
    c = _local(MemoryKV([CF, *RETRY_CFS]), clock)
    begun = [await c.begin(Message("Orders", f"m{i}".encode())) for i in range(3)]
    assert c.stats.undecided()[0] == 3  # actual: 2
    await c.decide(begun[2].id, Decision.COMMIT)
    assert c.stats.outcomes["committed"] == 1  # actual: 0


async def test_a_commit_cancelled_during_its_synced_write_is_not_counted_undecided_for_ever() -> None:
    """A gRPC CommitTransaction whose deadline passes while its synced write waits for the group commit
    is cancelled; the write is still applied (group_commit: "the caller was cancelled; its ops were
    still written") and the next round carries the commit out. The stats never hear of the decision:
    the undecided gauge and the oldest undecided age count a delivered transaction until a restart,
    and the outcome is never counted."""
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    c = _local(kv, clock)
    begun = await c.begin(Message("Orders", b"x"))
    writer = QueuedWriter(kv)
    c.records = TransactionRecords(kv, writer)  # the same store, its synced writes through the group commit
    decide = asyncio.create_task(c.decide(begun.id, Decision.COMMIT))
    await asyncio.wait_for(writer.queued.wait(), 5)
    decide.cancel()
    with pytest.raises(asyncio.CancelledError):
        await decide
    await writer.close()  # the queued write lands
    decided = c.records.get(begun.id)
    assert decided is not None and decided.decision is Decision.COMMIT  # the decision stands
    c.records = TransactionRecords(kv)
    assert await c.resend() == 1  # carried out: the message is in the retry store
    assert c.stats.undecided() == (0, None)  # actual: (1, age) for ever
    assert c.stats.outcomes["committed"] == 1  # actual: 0


async def test_a_begin_cancelled_during_its_synced_write_is_counted_undecided() -> None:
    """The same for a begin cancelled while its record's synced write waits: the record is written
    (PREPARED, open, asked about and decidable), the stats never count it, and its decision later is
    not counted either."""
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    writer = QueuedWriter(kv)
    c = _local(kv, clock, writer)
    begin = asyncio.create_task(c.begin(Message("Orders", b"x")))
    await asyncio.wait_for(writer.queued.wait(), 5)
    begin.cancel()
    with pytest.raises(asyncio.CancelledError):
        await begin
    await writer.close()
    [record] = c.records.open()
    assert record.decision is Decision.NONE
    assert c.stats.undecided()[0] == 1  # actual: 0
    c.records = TransactionRecords(kv)
    await c.decide(record.id, Decision.ROLLBACK)
    assert c.stats.outcomes["rolled_back"] == 1  # actual: 0


async def test_a_local_transaction_decided_by_the_check_endpoint_is_counted_as_checked() -> None:
    """README and the metric's help: committed/rolled_back are the app's decisions through the API,
    checked_commit/checked_rollback the app's check endpoint's. A stale local-outbox transaction that
    check_undecided decides from the check endpoint's answer is counted as "committed" (through
    _record's DECIDED_OUTCOME), as if the app had committed it through the API."""
    clock = FakeWallClock()
    answers: dict[str, TransactionState] = {}
    c = _local(MemoryKV([CF, *RETRY_CFS]), clock, answers=answers)
    begun = await c.begin(Message("Orders", b"x"))
    answers[begun.id] = TransactionState.COMMIT
    clock.wall_ms += 60_000
    assert await c.check_undecided() == 1
    assert c.stats.outcomes["checked_commit"] == 1  # actual: 0
    assert c.stats.outcomes["committed"] == 0  # actual: 1


OFFSET_ID = "0A00000100002A9F" + "000000000000BEEF"  # store host 10.0.0.1:10911, commit-log offset 0xBEEF


async def test_auto_mode_a_half_stored_degraded_is_not_delivered_a_second_time_by_its_check() -> None:
    """Mode auto. The broker stores the half but answers FLUSH_DISK_TIMEOUT (stored, not durable
    everywhere). send_half raises SendFailed ("as Java rolls those back", its docstring says) but sends
    no END_TRANSACTION ROLLBACK: the half stays undecided on the broker. The coordinator takes the
    SendFailed for "no broker stored the half" and begins the transaction in the local outbox, under
    the half's own UNIQ_KEY. The app commits: the outbox spools the message (delivered from the retry
    store). The broker then checks its half: check() finds the local record, answers COMMIT, and the
    broker delivers the half as well: two copies of a message the app committed once."""
    h = Harness()

    def degraded(cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.END_TRANSACTION:
            return cmd.response(ResponseCode.SUCCESS)
        stored = {"msgId": OFFSET_ID, "queueId": cmd.ext_fields.get("e", "0"), "queueOffset": "3"}
        return cmd.response(ResponseCode.FLUSH_DISK_TIMEOUT, ext_fields=stored)

    h.behaviour["broker-a"] = h.behaviour["broker-b"] = degraded
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    retry = RetryStore(kv, now_ms=clock.now_ms)
    c = TransactionCoordinator(
        TransactionRecords(kv), TransactionProducer(h.producer(), "txg"), None, now_ms=clock.now_ms,
        mode="auto", outbox=LocalOutbox(retry, lambda _t: POLICY),
    )  # fmt: skip
    begun = await c.begin(Message("T", b"x"))
    [(_, half_send, _)] = h.invoker.sends()
    assert half_send.code == RequestCode.SEND_MESSAGE_V2 and half_send.ext_fields["a"] == "txg"  # the half
    assert begun.local  # and the same message in the local outbox
    await c.decide(begun.id, Decision.COMMIT)
    assert retry.get(begun.id) is not None  # one copy: the outbox delivers it

    half = MessageExt(
        "T", b"x", 0, 3, 0xBEEF, 0, 0, 0, "", 0, "", 0, 0, 0, 0, {"UNIQ_KEY": begun.id, "PGROUP": "txg"},
        OFFSET_ID,
    )  # fmt: skip
    state = await c.check(CheckRequest("10.0.0.1:10911", 3, 0xBEEF, begun.id, begun.id, half))
    rolled_back = [
        cmd
        for _, cmd, _ in h.invoker.sends()
        if cmd.code == RequestCode.END_TRANSACTION
        and cmd.ext_fields["commitOrRollback"] == str(TRANSACTION_ROLLBACK_TYPE)
    ]
    # Fixed either way: the degraded half rolled back at once (Java), or its check not answered COMMIT.
    assert rolled_back or state is not TransactionState.COMMIT  # actual: no END, and COMMIT


def _degraded_broker(end_code: int) -> Harness:
    """Brokers that store every half as FLUSH_DISK_TIMEOUT and answer END_TRANSACTION ``end_code``."""
    h = Harness()

    def degraded(cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.END_TRANSACTION:
            return cmd.response(end_code)
        stored = {"msgId": OFFSET_ID, "queueId": cmd.ext_fields.get("e", "0"), "queueOffset": "3"}
        return cmd.response(ResponseCode.FLUSH_DISK_TIMEOUT, ext_fields=stored)

    h.behaviour["broker-a"] = h.behaviour["broker-b"] = degraded
    return h


def _ends(h: Harness) -> list[RemotingCommand]:
    return [cmd for _, cmd, _ in h.invoker.calls if cmd.code == RequestCode.END_TRANSACTION]


@pytest.mark.parametrize("end_code", [ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR])
async def test_a_half_stored_degraded_is_rolled_back_and_the_send_still_fails(end_code: int) -> None:
    """As Java's sendMessageInTransaction: END_TRANSACTION ROLLBACK of the half the broker named, before
    the SendFailed; a rollback the broker refuses does not hide the send's own error."""
    h = _degraded_broker(end_code)
    tx = TransactionProducer(h.producer(), "txg")
    with pytest.raises(SendFailed, match="FLUSH_DISK_TIMEOUT"):
        await tx.send_half(Message("T", b"x", id="AB" * 16))
    [end] = _ends(h)
    assert end.ext_fields["commitOrRollback"] == str(TRANSACTION_ROLLBACK_TYPE)
    assert end.ext_fields["fromTransactionCheck"] == "false" and end.ext_fields["msgId"] == "AB" * 16
    assert (end.ext_fields["tranStateTableOffset"], end.ext_fields["commitLogOffset"]) == ("3", str(0xBEEF))


async def test_auto_mode_a_degraded_half_is_rolled_back_and_its_check_answered_rollback() -> None:
    """Both halves of the fix: the rollback at once, and should it be lost, the check of a transaction
    carried by the local outbox answered ROLLBACK, committed or not, and counted nowhere."""
    h = _degraded_broker(ResponseCode.SUCCESS)
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    c = TransactionCoordinator(
        TransactionRecords(kv), TransactionProducer(h.producer(), "txg"), None, now_ms=clock.now_ms,
        mode="auto", outbox=LocalOutbox(RetryStore(kv, now_ms=clock.now_ms), lambda _t: POLICY),
    )  # fmt: skip
    begun = await c.begin(Message("T", b"x"))
    [end] = _ends(h)
    assert begun.local and end.ext_fields["msgId"] == begun.id  # the outbox holds it under the half's key
    half = MessageExt(
        "T", b"x", 0, 3, 0xBEEF, 0, 0, 0, "", 0, "", 0, 0, 0, 0, {"UNIQ_KEY": begun.id, "PGROUP": "txg"},
        OFFSET_ID,
    )  # fmt: skip
    check = CheckRequest("10.0.0.1:10911", 3, 0xBEEF, begun.id, begun.id, half)
    assert await c.check(check) is TransactionState.ROLLBACK  # undecided
    await c.decide(begun.id, Decision.COMMIT)
    assert await c.check(check) is TransactionState.ROLLBACK  # committed: the outbox delivers it
    assert c.stats.outcomes == {**dict.fromkeys(observed.OUTCOMES, 0), "committed": 1}


async def test_the_undecided_past_max_tracked_are_counted_after_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(observed, "MAX_TRACKED", 2)
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    begun = [await _local(kv, clock).begin(Message("Orders", f"m{i}".encode())) for i in range(3)]
    again = _local(kv, clock)
    assert again.stats.undecided()[0] == 3
    for r in begun:
        await again.decide(r.id, Decision.ROLLBACK)
    assert again.stats.undecided() == (0, None) and again.stats.outcomes["rolled_back"] == 3


class UnsyncedKV(MemoryKV):
    """A store whose WAL syncs fail once ``failing``: the group commit's batches are applied, unsynced."""

    failing = False

    def sync_wal(self) -> None:
        if self.failing:
            raise StorageError("sync failed")
        super().sync_wal()


async def test_a_decision_applied_but_not_synced_is_counted() -> None:
    """UnsyncedError: the store holds the decision (read, carried out, never written again), so the
    stats follow it; the caller still gets the error (nobody is told it is durable)."""
    clock = FakeWallClock()
    kv = UnsyncedKV([CF, *RETRY_CFS])
    c = _local(kv, clock, GroupCommitWriter(kv))
    begun = await c.begin(Message("Orders", b"x"))
    kv.failing = True
    with pytest.raises(UnsyncedError):
        await c.decide(begun.id, Decision.ROLLBACK)
    kv.failing = False
    held = c.records.get(begun.id)
    assert held is not None and held.decision is Decision.ROLLBACK
    assert c.stats.undecided() == (0, None) and c.stats.outcomes["rolled_back"] == 1
    await c.decide(begun.id, Decision.ROLLBACK)  # the app's retry: taken already, counted once
    assert c.stats.outcomes["rolled_back"] == 1


async def test_a_sweep_does_not_count_again_an_undecided_one_begun_since_the_start() -> None:
    """A store of an earlier version (records without index entries) is swept by the rounds; one begun
    since the start, indexed when written and counted then, is swept too but not counted twice."""
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    c = _local(kv, clock)
    old = await c.begin(Message("Orders", b"old"))
    kv.write([Delete(CF, OPEN + old.id.encode()), Delete(CF, SWEPT)], sync=True)  # as before the indexes
    c = _local(kv, clock)
    assert not c.records.swept and c.stats.undecided()[0] == 0
    await c.begin(Message("Orders", b"new"))
    assert c.stats.undecided()[0] == 1
    await c.maintain()
    assert c.records.swept and c.stats.undecided()[0] == 2
