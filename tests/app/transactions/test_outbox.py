"""The local outbox (issue 29), with no broker at all: begin syncs the message in the record, commit turns
it into an ordinary retry record (once, and counted once, however often a restart or a repeated commit
does it again), rollback drops it, an
undecided one past its timeout is checked with the app; and auto mode falls back to it only when no
broker stored the half, never for a message a broker refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.request import Limits
from rocksidecar.app.transactions.coordinator import (
    ASK_ROUND_MS,
    ASK_WAVE,
    LocalOutbox,
    TransactionConflict,
    TransactionCoordinator,
)
from rocksidecar.app.transactions.grpc import GrpcTransactions
from rocksidecar.app.transactions.records import CF, Decision, Record, TransactionRecords
from rocksidecar.retry import RetryStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.keys import PENDING_CF
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import decode_record
from rocksidecar.rmq import Message, SendFailed
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.errors import RocketMQError, for_code
from rocksidecar.rmq.producer.transaction import HalfReceipt, TransactionState
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock

POLICY = RetryPolicy((2.0, 10.0), 5)


class NoBroker:
    """A TransactionProducer whose half sends fail with ``error`` (none reaches a broker)."""

    def __init__(self, error: RocketMQError) -> None:
        self.error = error
        self.checker = None
        self.halves = 0

    async def send_half(self, msg: Message, *, sharding_key: str | None = None) -> HalfReceipt:
        self.halves += 1
        raise self.error


@dataclass
class Env:
    clock: FakeWallClock
    kv: MemoryKV
    retry: RetryStore
    asked: list[str]
    answers: dict[str, TransactionState]
    answer_ms: int = 0  # how long the app takes to answer (its time passes on the clock)
    writer: GroupCommitWriter | None = None  # synced writes through a group commit, as in serve
    policies: dict[str, RetryPolicy] = field(default_factory=dict)  # by message type; else POLICY
    # Asked about an id in here, the app's check endpoint sets ``asking`` and waits for the event
    held: dict[str, asyncio.Event] = field(default_factory=dict)
    asking: asyncio.Event = field(default_factory=asyncio.Event)

    def coordinator(self, mode: str, producer: object | None = None) -> TransactionCoordinator:
        async def ask_app(tx_id: str, key: str | None, topic: str) -> TransactionState:
            self.asked.append(tx_id)
            self.clock.wall_ms += self.answer_ms
            if tx_id in self.held:
                self.asking.set()
                await self.held[tx_id].wait()
            return self.answers.get(tx_id, TransactionState.UNKNOWN)

        policy_for = lambda type_: self.policies.get(type_, POLICY)  # noqa: E731
        outbox = LocalOutbox(self.retry, policy_for, undecided_timeout_ms=60_000)
        tx = producer or NoBroker(SendFailed("no broker", [], None))
        return TransactionCoordinator(
            TransactionRecords(self.kv, self.writer), tx,  # type: ignore[arg-type]
            ask_app, now_ms=self.clock.now_ms, mode=mode, outbox=outbox,
        )  # fmt: skip


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    env = Env(clock, kv, RetryStore(kv, now_ms=clock.now_ms), [], {})
    yield env
    if env.writer is not None:
        await env.writer.close()


async def test_commit_spools_rollback_drops(env: Env) -> None:
    c = env.coordinator("local")
    keep = await c.begin(Message("Orders", b"keep", keys=("k1",)), transaction_key="o-1", message_type="pay")
    drop = await c.begin(Message("Orders", b"drop"))
    assert keep.local and keep.message is not None and keep.message.body == b"keep"
    assert env.retry.stats().pending == 0  # nothing to deliver before the commit
    env.clock.wall_ms += 500
    committed = await c.decide(keep.id, Decision.COMMIT)
    assert committed.acknowledged and committed.message is None  # spooled: the record drops its copy
    rolled = await c.decide(drop.id, Decision.ROLLBACK)
    assert rolled.acknowledged and rolled.message is None
    assert env.retry.stats().pending == 1
    status = env.retry.get(keep.id)
    assert status is not None and status.next_attempt_at_ms == env.clock.wall_ms + 2000  # the ladder's rung
    assert env.retry.get(drop.id) is None
    [(_key, value)] = list(env.kv.scan(PENDING_CF, limit=10))
    assert b"keep" in value and b"pay" in value  # the message and its type went into the retry record
    assert (await c.decide(keep.id, Decision.COMMIT)) == committed  # a repeat: same answer, no new spool
    assert env.retry.stats().pending == 1


async def test_a_redone_commit_keeps_one_retry_record_counted_once(env: Env) -> None:
    """The process died after the decision was synced, before the spool (or before the spool was
    recorded as done): the restarted coordinator spools it once, however often it restarts."""
    begun = await env.coordinator("local").begin(Message("Orders", b"x"))
    decided = begun.decided(Decision.COMMIT, env.clock.now_ms())
    await env.coordinator("local").records.put(decided)  # synced; then the process died
    for _restart in range(2):
        env.clock.wall_ms += 10_000
        restarted = env.coordinator("local")
        assert await restarted.resend() == 1
        assert len(list(env.kv.scan(PENDING_CF, limit=10))) == 1  # one retry record
        assert env.retry.stats().pending == 1  # counted once: the gauge and the admin API say 1
        await restarted.records.put(decided)  # the "carried out" mark lost with the process


async def test_a_redone_commit_of_a_message_retried_or_dead_since_adds_nothing(env: Env) -> None:
    """Carried out again after a restart, a commit whose message the store holds already, on a later
    rung or dead, neither writes a second copy nor counts one."""
    begun = await env.coordinator("local").begin(Message("Orders", b"x"))
    decided = begun.decided(Decision.COMMIT, env.clock.now_ms())
    first = env.coordinator("local")
    await first.records.put(decided)
    assert await first.resend() == 1
    [(key, raw)] = list(env.kv.scan(PENDING_CF, limit=10))
    again = decode_record(raw).failed(env.clock.now_ms(), "broker down")
    retried = await env.retry.reschedule(key, again, env.clock.now_ms() + 60_000)
    for move in ("retried", "dead"):
        if move == "dead":
            await env.retry.bury(retried, decode_record(env.kv.get(PENDING_CF, retried) or b""), "refused")
        await first.records.put(decided)  # the "carried out" mark lost with the process
        restarted = env.coordinator("local")
        assert await restarted.resend() == 1
        stats = env.retry.stats()
        assert (stats.pending, stats.dead) == ((1, 0) if move == "retried" else (0, 1))
        assert len(list(env.kv.scan(PENDING_CF, limit=10))) == stats.pending


async def test_a_decision_carried_out_by_two_callers_at_once_is_spooled_once(env: Env) -> None:
    """The app repeats a commit while the background round carries the same decision out (after a
    restart, both find it not carried out): one retry record, counted once, the same answer to both."""
    begun = await env.coordinator("local").begin(Message("Orders", b"x"))
    await env.coordinator("local").records.put(begun.decided(Decision.COMMIT, env.clock.now_ms()))
    restarted = env.coordinator("local")
    by_app, resent = await asyncio.gather(restarted.decide(begun.id, Decision.COMMIT), restarted.resend())
    assert resent == 1 and by_app.acknowledged
    assert len(list(env.kv.scan(PENDING_CF, limit=10))) == 1
    assert env.retry.stats().pending == 1


async def test_undecided_past_the_timeout_is_checked_with_the_app(env: Env) -> None:
    c = env.coordinator("local")
    yes = await c.begin(Message("Orders", b"yes"))
    no = await c.begin(Message("Orders", b"no"))
    unsure = await c.begin(Message("Orders", b"unsure"))
    env.answers.update({yes.id: TransactionState.COMMIT, no.id: TransactionState.ROLLBACK})
    env.clock.wall_ms += 59_999
    assert await c.check_undecided() == 0 and env.asked == []  # not yet past the timeout
    env.clock.wall_ms += 1
    assert await c.check_undecided() == 2
    assert sorted(env.asked) == sorted([yes.id, no.id, unsure.id])
    states = {r.id: r.decision for r in c.records.all()}
    assert states == {yes.id: Decision.COMMIT, no.id: Decision.ROLLBACK, unsure.id: Decision.NONE}
    assert env.retry.stats().pending == 1 and env.retry.get(yes.id) is not None
    env.asked.clear()
    await c.maintain()  # asked again every round while the app does not know
    assert env.asked == [unsure.id]


async def test_an_app_that_never_answers_holds_a_round_one_wave_and_the_next_round_goes_on(env: Env) -> None:
    """check_undecided asked every stale local transaction one after another, each up to the check's
    timeout when the app hangs: 24 of them held the round (and the re-sends and announces of the rounds
    after it) for 2 minutes, 10 000 for 14 hours. Now a round asks ASK_WAVE at once, and no new wave
    after ASK_ROUND_MS; the next round starts after the last one asked."""
    c = env.coordinator("local")
    begun = sorted([(await c.begin(Message("Orders", b"x"))).id for _ in range(3 * ASK_WAVE)])
    env.clock.wall_ms += 60_000
    env.answer_ms = ASK_ROUND_MS  # the check's timeout: the app accepts and never answers
    for wave in range(4):
        env.asked.clear()
        await c.maintain()
        first = wave % 3 * ASK_WAVE
        assert sorted(env.asked) == begun[first : first + ASK_WAVE]  # the third wraps to the first
    env.answer_ms = 0  # a quick app: every one in one round
    env.answers.update(dict.fromkeys(begun, TransactionState.ROLLBACK))
    assert await c.check_undecided() == 3 * ASK_WAVE


async def test_auto_falls_back_only_when_no_broker_stored_the_half(env: Env) -> None:
    down = NoBroker(SendFailed("no broker", [], None))
    record = await env.coordinator("auto", down).begin(Message("Orders", b"x"))
    assert down.halves == 1 and record.local
    refused = NoBroker(
        for_code(ResponseCode.MESSAGE_ILLEGAL, "illegal")
    )  # the broker refused the message itself
    with pytest.raises(RocketMQError):
        await env.coordinator("auto", refused).begin(Message("Orders", b"x"))
    broker_only = NoBroker(SendFailed("no broker", [], None))
    with pytest.raises(SendFailed):
        await env.coordinator("broker", broker_only).begin(Message("Orders", b"x"))
    assert len(env.coordinator("local").records.all()) == 1  # only the auto one was kept


def test_a_mode_needs_its_outbox() -> None:
    with pytest.raises(ValueError, match="local outbox"):
        TransactionCoordinator(
            TransactionRecords(MemoryKV([CF])), NoBroker(SendFailed("x", [], None)),  # type: ignore[arg-type]
            None, mode="auto",
        )  # fmt: skip


@pytest.mark.parametrize("first", [Decision.COMMIT, Decision.ROLLBACK])
async def test_commit_and_rollback_at_once_one_is_refused(env: Env, first: Decision) -> None:
    """Both read the record undecided while the first one's synced write waited for the group commit:
    both answered 200, the app was told ROLLED_BACK while the commit had spooled the message. Now one
    is refused 409 and what happened is what the other answered."""
    env.writer = GroupCommitWriter(env.kv)
    c = env.coordinator("local")
    begun = await c.begin(Message("Orders", b"x"))
    other = Decision.ROLLBACK if first is Decision.COMMIT else Decision.COMMIT
    won, lost = await asyncio.gather(
        c.decide(begun.id, first), c.decide(begun.id, other), return_exceptions=True
    )
    assert isinstance(won, Record) and won.decision is first and won.acknowledged, won
    assert isinstance(lost, TransactionConflict), lost
    assert c.records.get(begun.id) == won
    assert (env.retry.get(begun.id) is not None) is (first is Decision.COMMIT)  # spooled only if committed
    assert c._turns == {}  # a transaction's lock goes once nobody decides it


@pytest.mark.parametrize("app_decides", [Decision.ROLLBACK, Decision.COMMIT])
async def test_a_check_answered_after_the_apps_decision_leaves_it_and_the_round_goes_on(
    env: Env, app_decides: Decision
) -> None:
    """check_undecided asks the app about two stale transactions; while it is asked, the app decides the
    first itself. Decided the other way, that one raised TransactionConflict out of the round, and the
    second was never decided; decided the same way, it was counted as the round's. Now the app's own
    decision stands, is not counted, and the round goes on with the second."""
    env.writer = GroupCommitWriter(env.kv)
    c = env.coordinator("local")
    first, second = sorted([(await c.begin(Message("Orders", b"x"))).id for _ in range(2)])  # asked in order
    env.answers.update({first: TransactionState.COMMIT, second: TransactionState.COMMIT})
    env.held[first] = asyncio.Event()
    env.clock.wall_ms += 60_000
    round_ = asyncio.create_task(c.check_undecided())
    await asyncio.wait_for(env.asking.wait(), 5)
    by_app = await c.decide(first, app_decides)
    env.held[first].set()
    assert await asyncio.wait_for(round_, 5) == 1  # the second only
    assert c.records.get(first) == by_app
    assert (env.retry.get(first) is not None) is (app_decides is Decision.COMMIT)
    decided = c.records.get(second)
    assert decided is not None and decided.decision is Decision.COMMIT and decided.acknowledged
    assert env.retry.stats().pending == (2 if app_decides is Decision.COMMIT else 1)
    assert c._turns == {}


async def test_a_message_begun_over_grpc_keeps_its_type(env: Env) -> None:
    """BeginTransaction dropped the message's type (the HTTP route passes it): the outbox stored the
    topic as its type and, once committed, the message was retried on the default ladder."""
    env.policies["payments"] = RetryPolicy((7.0,), 5)
    c = env.coordinator("local")
    rpcs = GrpcTransactions(c, Limits(max_body_bytes=1024, max_delay_ms=60_000), env.clock.now_ms)
    message = pb.Message(topic="Orders", body=b"x", type="payments")
    begun = await rpcs.begin(pb.BeginTransactionRequest(message=message))
    record = c.records.get(begun.id)
    assert record is not None and record.message is not None and record.message.type == "payments"
    committed = await rpcs.decide(begun.id, commit=True)
    assert committed.state == pb.TX_COMMITTED and committed.acknowledged
    status = env.retry.get(begun.id)
    assert status is not None and status.next_attempt_at_ms == env.clock.wall_ms + 7_000  # its type's rung
