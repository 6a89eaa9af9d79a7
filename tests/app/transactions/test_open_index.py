"""Every open transaction is reached however many decided ones the store keeps (session 14, "bounds"):
resend, check_undecided and purge read indexes kept beside the records (in the same write batch), not
the first 10 000 records of the column family; a round reads a bounded number of index entries and the
next goes on after it; a store written before the indexes is swept into them by the rounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from rocksidecar.app.transactions import coordinator as coordinator_module
from rocksidecar.app.transactions.coordinator import KEEP_DECIDED_MS, LocalOutbox, TransactionCoordinator
from rocksidecar.app.transactions.records import CF, OPEN, SWEPT, Decision, Record, TransactionRecords
from rocksidecar.retry import RetryStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq import Message, SendFailed
from rocksidecar.rmq.producer.transaction import TransactionState
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.kv import Op, Put
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.message import StoredMessage
from tests.fakes import FakeWallClock

from .test_outbox import NoBroker

OLD_LIMIT = 10_000  # what records.open(), all() and purge() read before
LAST = "F" * 32  # sorts after every id of the decided ones


@dataclass
class Env:
    clock: FakeWallClock = field(default_factory=FakeWallClock)
    kv: MemoryKV = field(default_factory=lambda: MemoryKV([CF, *RETRY_CFS]))
    asked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.retry = RetryStore(self.kv, now_ms=self.clock.now_ms)

    def coordinator(self) -> TransactionCoordinator:
        async def ask_app(tx_id: str, key: str | None, topic: str) -> TransactionState:
            self.asked.append(tx_id)
            return TransactionState.UNKNOWN

        outbox = LocalOutbox(self.retry, lambda _type: RetryPolicy((2.0,), 3), undecided_timeout_ms=60_000)
        return TransactionCoordinator(
            TransactionRecords(self.kv), NoBroker(SendFailed("no broker", [], None)),  # type: ignore[arg-type]
            ask_app, now_ms=self.clock.now_ms, mode="local", outbox=outbox,
        )  # fmt: skip

    def local(self, tx_id: str, created_ms: int | None = None) -> Record:
        created = self.clock.now_ms() if created_ms is None else created_ms
        msg = StoredMessage(tx_id, "Orders", b"x", type="Orders", created_ms=created)
        return Record(tx_id, None, created, message=msg)

    async def carried_out(self, records: TransactionRecords, count: int, decided_ms: int) -> None:
        """``count`` decided and carried-out transactions with ids below LAST (a busy day's)."""
        for i in range(count):
            done = self.local(f"{i:032X}").decided(Decision.ROLLBACK, decided_ms).carried_out(decided_ms)
            await records.put(done, sync=False)


@pytest.fixture
def env() -> Env:
    return Env()


async def test_a_decision_past_10000_carried_out_ones_is_carried_out(env: Env) -> None:
    """Before: resend read the first 10 000 records, all carried out, and never this one (0 resent)."""
    c = env.coordinator()
    await env.carried_out(c.records, OLD_LIMIT + 1, env.clock.now_ms())
    await c.records.put(env.local(LAST).decided(Decision.COMMIT, env.clock.now_ms()))  # the process died
    assert await c.resend() == 1
    assert env.retry.get(LAST) is not None and c.records.open() == []


async def test_a_stale_local_one_past_10000_carried_out_ones_is_asked(env: Env) -> None:
    """Before: check_undecided never asked it (a local transaction nobody asks about is never sent)."""
    c = env.coordinator()
    await env.carried_out(c.records, OLD_LIMIT + 1, env.clock.now_ms())
    await c.records.put(env.local(LAST))
    env.clock.wall_ms += 60_000
    await c.check_undecided()
    assert env.asked == [LAST]


async def test_purge_reaches_old_ones_past_10000_open_ones(env: Env) -> None:
    """Before: purge read the first 10 000 records, all open, and forgot nothing."""
    c = env.coordinator()
    for i in range(OLD_LIMIT + 1):
        await c.records.put(env.local(f"{i:032X}"), sync=False)
    old = env.local(LAST).decided(Decision.ROLLBACK, env.clock.now_ms()).carried_out(env.clock.now_ms())
    await c.records.put(old)
    env.clock.wall_ms += KEEP_DECIDED_MS + 1
    assert c.records.purge(env.clock.now_ms() - KEEP_DECIDED_MS) == 1
    assert c.records.get(LAST) is None and env.kv.scan(CF, lower=b"~d/", upper=b"~d0") == []


async def test_a_round_reads_a_bounded_part_of_the_open_index_and_the_next_goes_on(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator_module, "ROUND_ENTRIES", 3)
    c = env.coordinator()
    for i in range(7):
        await c.records.put(env.local(f"{i:032X}").decided(Decision.COMMIT, env.clock.now_ms()))
    assert [await c.resend() for _ in range(4)] == [3, 3, 1, 0]
    assert c.records.open() == []


async def test_a_store_written_before_the_indexes_is_swept_by_the_rounds(env: Env) -> None:
    now = env.clock.now_ms()
    stale = env.local("A" * 32, now - 60_000)
    unsent = env.local("B" * 32).decided(Decision.COMMIT, now)
    long_ago = now - KEEP_DECIDED_MS - 1
    old = env.local("C" * 32).decided(Decision.ROLLBACK, long_ago).carried_out(long_ago)
    env.kv.write([Put(CF, r.id.encode(), r.to_value()) for r in (stale, unsent, old)], sync=True)  # no index
    c = env.coordinator()
    assert not c.records.swept and c.records.open() == [] and c.stats.undecided()[0] == 0
    await c.maintain()
    assert c.records.swept and env.kv.get(CF, SWEPT) is not None
    assert env.asked == [stale.id] and env.retry.get(unsent.id) is not None  # asked, carried out
    assert c.records.get(old.id) is None  # purged
    assert c.stats.undecided()[0] == 1  # the swept undecided one is counted
    assert env.coordinator().records.swept  # a restart does not sweep again


async def test_an_index_entry_left_behind_is_corrected_when_read(env: Env) -> None:
    """The sweep reads a record, a decision is written (off the event loop) before the sweep writes the
    entry it read: the entry says open, the record is carried out. Reading it corrects it."""
    c = env.coordinator()
    r = env.local("A" * 32)
    await c.records.put(r)
    done = r.decided(Decision.ROLLBACK, env.clock.now_ms()).carried_out(env.clock.now_ms())
    env.kv.write([Put(CF, done.id.encode(), done.to_value())], sync=True)  # the record, not its entries
    assert c.records.open() == []
    assert env.kv.get(CF, OPEN + r.id.encode()) is None
    env.clock.wall_ms += KEEP_DECIDED_MS + 1
    assert c.records.purge(env.clock.now_ms() - KEEP_DECIDED_MS) == 1  # in the carried-out index now


async def test_index_keys_are_no_transaction_ids(env: Env) -> None:
    c = env.coordinator()
    await c.begin(Message("Orders", b"x"))
    await c.maintain()  # writes the swept mark
    assert c.records.get(SWEPT.decode()) is None and c.records.get("~o/") is None
    assert [r.id for r in c.records.all()] == [r.id for r in c.records.open()]


class _NoSweepMark(MemoryKV):
    """A store whose writes of the swept mark fail (as every write of a store opened read-only does)."""

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        if any(op.key == SWEPT for op in ops if isinstance(op, Put)):
            raise StorageError("read-only")
        super().write(ops, sync=sync, no_slowdown=no_slowdown)


async def test_a_sweep_that_cannot_write_does_not_stop_the_round() -> None:
    env = Env(kv=_NoSweepMark([CF, *RETRY_CFS]))
    c = env.coordinator()
    await c.records.put(env.local(LAST).decided(Decision.COMMIT, env.clock.now_ms()))
    await c.maintain()
    assert not c.records.swept and env.retry.get(LAST) is not None  # re-sent all the same


async def test_the_admin_open_listing_reads_the_index_past_a_days_carried_out_ones(env: Env) -> None:
    """Before: the listing scanned the records, 10 000 a page, and answered an empty page (with a cursor)
    while a day's carried-out ones came first."""
    from rocksidecar.app.transactions.admin import transactions_view
    from rocksidecar.storage.query import Filter

    c = env.coordinator()
    await env.carried_out(c.records, OLD_LIMIT + 1, env.clock.now_ms())
    await c.records.put(env.local(LAST))
    read, _ = transactions_view(c).sources["open"]
    first = read(Filter(), limit=10)
    assert [r.id for r in first.items] == [LAST] and first.cursor is None
    await c.decide(LAST, Decision.ROLLBACK)  # carried out at once into the outbox: no longer open
    assert read(Filter(), limit=10).items == []
