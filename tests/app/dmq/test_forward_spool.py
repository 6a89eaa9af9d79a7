"""Issue 26: one conversion of a failed send into a stored retry. A delayed message the Rock-DMQ
forwarder cannot hand to a broker is spooled as the sidecar spools its own failed sends: every field the
sidecar keeps (id, body, tags, keys, properties with the trace context, sharding key, type, creation
time) and the same attempt bookkeeping, each message with its own error, and the operator is told. A
replica's retry store tells the operator of its failed publishes only, as the sidecar does: not of a due
message held, untried, behind its key's lane."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rocksidecar.app.delivery_policy import BEHIND
from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.forward import COLUMN_FAMILIES, Forwarder
from rocksidecar.app.dmq.service import SpoolLoggingRetryStore
from rocksidecar.app.request import Prepared
from rocksidecar.app.sidecar import Sidecar, Status
from rocksidecar.app.store_delivery import StoreDelivery
from rocksidecar.delay import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay import SPOOLED, DelayedMessage, DelayStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message, RocketMQError, SendResult
from rocksidecar.rmq.errors import RequestTimeout
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.message import StoredMessage
from tests.app.test_sender_seam import OtherTransport
from tests.fakes import FakeWallClock

INNER = "dmq_inner_test"
ACCEPTED_MS = 1_000  # the sidecar takes the request
FAILED_MS = 1_500  # every send attempt has failed
TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}


class Clock:
    def __init__(self) -> None:
        self.ms = ACCEPTED_MS

    def __call__(self) -> int:
        return self.ms


class Unreachable(OtherTransport):
    """A Sender no broker answers: each message fails with its own error, and the attempts took time."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        self.clock.ms = FAILED_MS
        raise RocketMQError(f"no broker for {msg.id}")


class Spool:
    def __init__(self) -> None:
        self.records: list[tuple[RetryRecord, int | None]] = []

    async def spool(self, record: RetryRecord, due_ms: int | None = None) -> object:
        self.records.append((record, due_ms))
        return None

    async def spool_many(self, records: Sequence[RetryRecord], due_ms: int | None = None) -> object:
        self.records.extend((r, due_ms) for r in records)
        return None


def prepared(id_: str, deliver_at_ms: int | None) -> Prepared:
    msg = Message(
        "Orders", b'{"n":1}', tags="paid", keys=("order-7", "cust-3"), properties=dict(TRACE), id=id_
    )
    return Prepared(msg, "cust-3", "orders", deliver_at_ms)


def sidecar(
    clock: Clock, spool: Spool, spooled: list[RetryRecord], forwarder: Forwarder | None = None
) -> Sidecar:
    return Sidecar(
        Unreachable(clock),
        spool,
        policy_for=lambda _type: RetryPolicy((2.0,), 5),
        delay=forwarder,
        now_ms=clock,
        on_spooled=spooled.append,
    )


def forwarder(clock: Clock, spool: Spool, spooled: list[RetryRecord]) -> Forwarder:
    kv = MemoryKV(COLUMN_FAMILIES)
    return Forwarder(
        Unreachable(clock),  # type: ignore[arg-type]  # the Producer's two send calls are all it uses
        spool,
        kv,
        GroupCommitWriter(kv),
        policy_for=lambda _type: RetryPolicy((2.0,), 5),
        now_ms=clock,
        inner_topic=INNER,
        on_spooled=spooled.append,
    )


async def test_a_message_spooled_by_the_forwarder_keeps_what_the_sidecar_keeps() -> None:
    clock, spool, told = Clock(), Spool(), []
    direct = await sidecar(clock, spool, told).send(prepared("id-direct", None))
    assert direct.status is Status.SPOOLED
    ((kept, kept_due),) = spool.records

    clock.ms, fspool, ftold = ACCEPTED_MS, Spool(), []
    via = sidecar(clock, fspool, ftold, forwarder(clock, fspool, ftold))
    due_at = 60_000
    scheduled = await via.send(prepared("id-delayed", due_at))
    assert scheduled.status is Status.SCHEDULED  # 202: synced to the retry store
    ((forwarded, forwarded_due),) = fspool.records

    # The message: everything the sidecar keeps, wrapped as the inner format says.
    assert (forwarded.id, forwarded.topic, forwarded.body) == ("id-delayed", INNER, kept.body)
    assert (forwarded.tags, forwarded.keys) == (kept.tags, kept.keys) == ("paid", ("order-7", "cust-3"))
    assert dict(kept.properties) == TRACE
    assert {**forwarded.properties} == {
        **TRACE,
        inner.REAL_TOPIC: "Orders",
        inner.DELIVER_MS: str(due_at),
        inner.SHARDING_KEY: kept.sharding_key,
    }
    assert forwarded.sharding_key == "id-delayed"  # the inner queue of its id, as a direct send
    assert forwarded.type == INNER  # the inner topic's ladder, whose topic it is
    assert forwarded.created_ms == ACCEPTED_MS  # when the sidecar accepted it, not when it was spooled

    # The attempts: the same bookkeeping, each counter as the sidecar's.
    for record in (kept, forwarded):
        assert record.first_failure_ms == FAILED_MS
        assert (record.retry_count, record.failed_attempts) == (0, 1)
        assert record.last_error == f"no broker for {record.id}"
        assert record.history == ((FAILED_MS, record.last_error),)
    assert kept_due == forwarded_due == FAILED_MS + 2_000
    assert told == [kept] and ftold == [forwarded]  # the operator's log hears of both


async def test_each_forwarded_message_is_spooled_with_its_own_error() -> None:
    clock, spool, told = Clock(), Spool(), []
    fwd = forwarder(clock, spool, told)
    a, b = (sidecar(clock, spool, told).delayed(prepared(id_, 60_000)) for id_ in ("id-a", "id-b"))
    await fwd.schedule_many([a, b])
    assert [(r.id, r.last_error) for r, _ in spool.records] == [
        ("id-a", "no broker for id-a"),
        ("id-b", "no broker for id-b"),
    ]
    assert told == [r for r, _ in spool.records]


async def test_a_forwarded_due_time_goes_out_as_a_wall_time_when_the_clock_leads() -> None:
    # After a step back the stores' clock leads the wall clock (SteadyClock.lead_ms); due times in the
    # sidecar are on that clock, the service reads the inner message's as a wall time: the lead comes off.
    clock, fspool, ftold = Clock(), Spool(), []
    fwd = dataclasses.replace(forwarder(clock, fspool, ftold), lead_ms=lambda: 3_600_000)
    due_at = ACCEPTED_MS + 3_600_000 + 60_000  # a minute from now by the wall clock
    await sidecar(clock, fspool, ftold, fwd).send(prepared("id-delayed", due_at))
    ((forwarded, _),) = fspool.records
    assert forwarded.properties[inner.DELIVER_MS] == str(ACCEPTED_MS + 60_000)


class _NothingSent(OtherTransport):
    """A Sender that must not be asked: the message is held behind its lane, untried."""

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        raise AssertionError(f"{msg.body!r} was sent")


async def test_a_replicas_due_message_held_behind_its_lane_is_not_logged_as_a_failed_publish() -> None:
    """The key's lane holds a publish that failed (spooled, told: right). The key's next message falls
    due: held behind it, untried (SPOOLED to the scheduler, lastError BEHIND). The operator is told only
    of the failed publish, as the sidecar tells none it holds (README: publishes that fail and are
    spooled are logged, as in the sidecar)."""
    clock = FakeWallClock()
    kv = MemoryKV((*RETRY_CFS, *DELAY_CFS))
    writer = GroupCommitWriter(kv)
    told: list[RetryRecord] = []
    retry = SpoolLoggingRetryStore(kv, writer=writer, on_spooled=told.append, on_dead_letter=lambda _d: None)
    delay = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    delivery = StoreDelivery(  # as DmqService wires it (delivery_loops: the store's lanes)
        _NothingSent(), retry, delay, policy_for=lambda _t: RetryPolicy(), now_ms=retry.now_ms, lanes=retry
    )
    try:
        now = clock.now_ms()
        first = StoredMessage("d0", "Orders", b"D0", sharding_key="cust-3", type="orders", created_ms=now)
        failed = RetryRecord.of(first, error=str(RequestTimeout("no answer")), failed_at_ms=now)
        await retry.spool(failed, now + 3_000)  # what a publish that failed spools
        assert [r.id for r in told] == ["d0"]
        due = DelayedMessage("d1", "Orders", b"D1", sharding_key="cust-3", type="orders", due_ms=now)
        assert await delivery.publish_delayed([due]) == [SPOOLED]
        held = retry.get("d1")
        assert held is not None and held.last_error == BEHIND
        assert [r.id for r in told] == ["d0"]
    finally:
        await retry.close()
        await writer.close()
