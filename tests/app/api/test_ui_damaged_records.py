"""Review of what the operator's views show of hostile or malformed content: /ui and the admin
listings must show one bad record (as the retry and delay listings do, marking it corrupt) rather than
answer 500 for the whole page, or blame the caller's cursor for the store's damage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from rocksidecar.app.api.admin import AdminOps, TransactionsView, admin_routes
from rocksidecar.app.api.ui import UiDeps, ui_routes
from rocksidecar.app.history import History
from rocksidecar.app.metrics import Metrics
from rocksidecar.app.transactions.admin import _reader
from rocksidecar.app.transactions.http import view as transaction_view
from rocksidecar.app.transactions.records import CF as TX_CF
from rocksidecar.app.transactions.records import OPEN, UNDECIDED_BROKER, TransactionRecords
from rocksidecar.delay import DelayStore
from rocksidecar.delay.keys import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.retry.dead_letter import encode_dead
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.keys import DEAD_CF
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord, encode_record
from rocksidecar.retry.recovery import RecoveryReplay
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock


@dataclass
class Env:
    retry: RetryStore
    tx_kv: MemoryKV
    http: httpx.AsyncClient
    clock: FakeWallClock


def _summary() -> dict[str, Any]:
    return {"undecided": 1, "oldestUndecidedAgeS": 0.0, "outcomes": {}}


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = FakeWallClock()
    retry = RetryStore(MemoryKV(list(RETRY_CFS)), now_ms=clock.now_ms)
    delay_kv = MemoryKV(list(DELAY_CFS))
    delay = DelayStore(delay_kv, GroupCommitWriter(delay_kv))
    tx_kv = MemoryKV([TX_CF])
    records = TransactionRecords(tx_kv)
    transactions = TransactionsView(
        sources={
            "open": (_reader(records, True), transaction_view),
            "all": (_reader(records, False), transaction_view),
        },
        summary=_summary,
    )

    async def deliver(_record: RetryRecord) -> None:
        raise AssertionError("nothing is replayed here")

    replay = ReplayLoop(retry, deliver, lambda _t: RetryPolicy((600.0,), 3))
    ops = AdminOps(
        retry,
        delay,
        replay,
        RecoveryReplay(retry, replay),
        lambda: [],
        clock.now_ms,
        transactions=transactions,
    )
    app = FastAPI()
    admin_routes(app, ops)
    ui_routes(app, UiDeps(ops, Metrics(), History()))
    # as a served sidecar answers an exception: a 500, not an exception raised into the test
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as http:
        yield Env(retry, tx_kv, http, clock)


async def _bury(env: Env, id_: str, topic: str) -> RetryRecord:
    record = RetryRecord(id=id_, topic=topic, body=b"x")
    key = await env.retry.spool(record)
    failed = record.failed(env.clock.now_ms(), "SystemBusy")
    await env.retry.bury(key, failed, "retries exhausted after 1")
    return failed


async def test_ui_shows_a_dead_letter_whose_stored_death_time_is_out_of_range(env: Env) -> None:
    """A dead letter whose envelope holds a death time datetime cannot show (decode_dead takes any int):
    the admin listing shows it, /ui answers 500 and the operator loses the whole status page."""
    good = await _bury(env, "0A0B0C0D", "Good")
    bad = await _bury(env, "0E0F1011", "Bad")
    [dkey] = [k for k, v in env.retry.kv.scan(DEAD_CF) if b"0E0F1011" in k]
    env.retry.kv.write(
        [Put(DEAD_CF, dkey, encode_dead("retries exhausted", 10**17, encode_record(bad)))], sync=True
    )

    listed = await env.http.get("/v1/admin/retries", params={"state": "dead"})
    assert listed.status_code == 200
    assert sorted(i["id"] for i in listed.json()["items"]) == sorted([good.id, bad.id])

    page = await env.http.get("/ui")
    assert page.status_code == 200, page.text[:300]  # today: 500 (OverflowError/ValueError in _when)
    assert good.id in page.text and bad.id in page.text


def _open_transaction(env: Env, tx_id: str, value: bytes) -> None:
    env.tx_kv.write(
        [Put(TX_CF, tx_id.encode(), value), Put(TX_CF, OPEN + tx_id.encode(), UNDECIDED_BROKER)], sync=True
    )


async def test_a_damaged_transaction_record_is_not_blamed_on_the_callers_cursor(env: Env) -> None:
    """One open transaction record that does not decode: the listing, asked without any cursor, answers
    400 naming ``cursor`` (its decode error taken for a bad cursor), telling the operator their request
    was wrong when the store's record is."""
    _open_transaction(env, "AB" * 16, b"\x00not json")
    listed = await env.http.get("/v1/admin/transactions")
    assert not (listed.status_code == 400 and listed.json().get("field") == "cursor"), listed.text


async def test_ui_survives_a_damaged_transaction_record(env: Env) -> None:
    """The same record takes the whole status page down: /ui answers 500 (brokers, store depths and
    dead letters unseen) instead of showing the page with that one row marked or left out."""
    _open_transaction(env, "AB" * 16, b"\x00not json")
    page = await env.http.get("/ui")
    assert page.status_code == 200, page.text[:300]  # today: 500 (orjson.JSONDecodeError in render)
