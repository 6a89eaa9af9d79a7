"""Transactions in /v1/admin, /metrics and /ui (issue 29): the open ones listed and paged by id (bad input a
400 naming the field), decisions counted by outcome (the app's through the API, the check endpoint's
when a broker asks, UNKNOWN answers) and the undecided ones' count and oldest age, also after a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI

from rocksidecar.app.api.admin import AdminOps, admin_routes
from rocksidecar.app.api.ui import UiDeps, ui_routes
from rocksidecar.app.history import History
from rocksidecar.app.metrics import Metrics, TransactionCollector
from rocksidecar.app.transactions.admin import transactions_view
from rocksidecar.app.transactions.coordinator import TransactionCoordinator
from rocksidecar.app.transactions.observed import OUTCOMES
from rocksidecar.app.transactions.records import Decision, Record
from rocksidecar.delay import DelayStore
from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.devbroker import DevCluster
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.recovery import RecoveryReplay
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.rmq import Message, MessageExt
from rocksidecar.rmq.producer.transaction import CheckRequest, TransactionState
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.app.transactions.conftest import Started
from tests.fakes import FakeWallClock

TOPIC = "TxAdmin"


@dataclass
class Env:
    coordinator: TransactionCoordinator
    http: httpx.AsyncClient
    metrics: Metrics
    clock: FakeWallClock
    answers: dict[str, TransactionState]

    async def check(self, record: Record) -> TransactionState:
        """Answer a broker's check-back of ``record``'s half, as the client does."""
        half = MessageExt(
            TOPIC, b"", 0, record.receipt.queue_offset, record.receipt.commit_log_offset, 0, 0, 0, "", 0, "",
            0, 0, 0, 0, {"UNIQ_KEY": record.id, "PGROUP": record.receipt.group}, record.receipt.offset_msg_id,
        )  # fmt: skip
        request = CheckRequest("127.0.0.1:1", 0, record.receipt.commit_log_offset, record.id, record.id, half)
        return await self.coordinator.check(request)

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def _admin_ops(coordinator: TransactionCoordinator, clock: FakeWallClock) -> AdminOps:
    retry = RetryStore(MemoryKV(list(RETRY_CFS)), now_ms=clock.now_ms)
    delay_kv = MemoryKV(list(DELAY_CFS))

    async def deliver(_record: RetryRecord) -> None:
        raise AssertionError("nothing is spooled here")

    replay = ReplayLoop(retry, deliver, lambda _t: RetryPolicy((1.0,), 3))
    return AdminOps(
        retry, DelayStore(delay_kv, GroupCommitWriter(delay_kv)), replay, RecoveryReplay(retry, replay),
        lambda: [], clock.now_ms, transactions=transactions_view(coordinator),
    )  # fmt: skip


@pytest.fixture
async def env(started: Started, clock: FakeWallClock) -> AsyncIterator[Env]:
    answers: dict[str, TransactionState] = {}

    async def ask_app(tx_id: str, key: str | None, topic: str) -> TransactionState:
        return answers.get(tx_id, TransactionState.UNKNOWN)

    coordinator = TransactionCoordinator(started.records, started.tx, ask_app, now_ms=clock.now_ms)
    metrics = Metrics()
    metrics.add_state(TransactionCollector(lambda: coordinator.stats.outcomes, coordinator.stats.undecided))
    ops = _admin_ops(coordinator, clock)
    app = FastAPI()
    admin_routes(app, ops)
    ui_routes(app, UiDeps(ops, metrics, History()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as http:
        yield Env(coordinator, http, metrics, clock, answers)


async def test_outcomes_undecided_and_the_open_listing(env: Env) -> None:
    c = env.coordinator
    begun = [await c.begin(Message(TOPIC, f"m{i}".encode()), transaction_key=f"k{i}") for i in range(5)]
    first_ms = env.clock.now_ms()
    await c.decide(begun[0].id, Decision.COMMIT)
    await c.decide(begun[0].id, Decision.COMMIT)  # a repeat decides nothing more
    await c.decide(begun[1].id, Decision.ROLLBACK)
    env.answers[begun[2].id] = TransactionState.COMMIT
    env.answers[begun[3].id] = TransactionState.ROLLBACK
    env.clock.wall_ms += 6_000
    assert await env.check(begun[2]) is TransactionState.COMMIT
    assert await env.check(begun[3]) is TransactionState.ROLLBACK
    assert await env.check(begun[4]) is TransactionState.UNKNOWN
    assert await env.check(begun[4]) is TransactionState.UNKNOWN
    assert await env.check(begun[0]) is TransactionState.COMMIT  # from the record: no outcome again

    expected = {"committed": 1, "rolled_back": 1, "checked_commit": 1, "checked_rollback": 1, "unknown": 2}
    assert c.stats.outcomes == expected
    for outcome in OUTCOMES:
        assert env.sample("rocksidecar_transactions_total", outcome=outcome) == expected[outcome]
    assert env.sample("rocksidecar_transactions_undecided") == 1
    age = (env.clock.now_ms() - first_ms) / 1000
    assert env.sample("rocksidecar_transaction_oldest_undecided_age_seconds") == age

    listed = (await env.http.get("/v1/admin/transactions")).json()
    assert [t["id"] for t in listed["items"]] == [begun[4].id] and listed["nextCursor"] is None
    assert listed["items"][0]["state"] == "PREPARED" and listed["items"][0]["transactionKey"] == "k4"
    ids: list[str] = []
    cursor = None
    while True:  # state=all, two a page, to the end
        params = {"state": "all", "limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await env.http.get("/v1/admin/transactions", params=params)).json()
        ids += [t["id"] for t in page["items"]]
        if (cursor := page["nextCursor"]) is None:
            break
    assert ids == sorted(r.id for r in begun)
    other = await env.http.get("/v1/admin/transactions", params={"state": "all", "topic": "Other"})
    assert other.json()["items"] == []

    stats = (await env.http.get("/v1/admin/stats")).json()["transactions"]
    assert stats == {"undecided": 1, "oldestUndecidedAgeS": age, "outcomes": expected}
    page = (await env.http.get("/ui")).text
    assert "<h2>Transactions</h2>" in page and begun[4].id in page and begun[0].id not in page
    assert 'data-k="transactions-checked_commit">1<' in page and 'data-k="transactions-undecided">1<' in page


async def test_a_restarted_coordinator_counts_the_undecided_from_the_records(
    env: Env, started: Started
) -> None:
    r = await env.coordinator.begin(Message(TOPIC, b"x"))
    env.clock.wall_ms += 2_000
    again = TransactionCoordinator(started.records, started.tx, None, now_ms=env.clock.now_ms)
    assert again.stats.undecided() == (1, 2.0)
    await again.decide(r.id, Decision.ROLLBACK)
    assert again.stats.undecided() == (0, None) and again.stats.outcomes["rolled_back"] == 1


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"state": "dead"}, "state"),
        ({"type": "T"}, "type"),
        ({"dueBefore": "5"}, "dueBefore"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"cursor": "!!"}, "cursor"),
        ({"surprise": "1"}, "surprise"),
    ],
)
async def test_bad_listing_input_is_400_naming_the_field(env: Env, query: dict[str, str], field: str) -> None:
    resp = await env.http.get("/v1/admin/transactions", params=query)
    assert resp.status_code == 400 and resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["field"] == field


async def test_a_broker_check_back_is_counted(
    env: Env, started: Started, cluster: DevCluster, clock: FakeWallClock
) -> None:
    """Through devbroker's own check round and the client's CHECK_TRANSACTION_STATE handler."""
    broker = next(iter(cluster.brokers.values()))
    decided: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    r = await env.coordinator.begin(Message(TOPIC, b"x"))
    broker.transactions.on_decided = lambda offset, kind: (
        decided.set_result(kind) if offset == r.receipt.queue_offset and not decided.done() else None
    )
    env.answers[r.id] = TransactionState.COMMIT
    await started.producer.instance.heartbeat_to(broker.addr)
    clock.wall_ms += 6_000
    assert broker.transactions.check_round() == 1
    await asyncio.wait_for(decided, 5.0)
    assert env.coordinator.stats.outcomes["checked_commit"] == 1
    assert env.sample("rocksidecar_transactions_undecided") == 0
