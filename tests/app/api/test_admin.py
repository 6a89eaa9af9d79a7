"""The admin API of a running sidecar: listings with filters and paging, one message with its history,
re-drive, replay now, purge with confirmation, and bad input as problem+json naming the field."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from rocksidecar.retry.policy import RetryPolicy
from tests.app.conftest import Stack

SLOW = RetryPolicy((600.0,), 1000)  # a ten-minute first rung: nothing is replayed unless asked


@pytest.fixture
async def down(make_stack: Callable[..., Any]) -> AsyncIterator[Stack]:
    """A sidecar whose brokers are down, with a slow ladder."""
    async with make_stack(retry_default=SLOW) as stack:
        await stack.stop_brokers()
        yield stack


async def spool(stack: Stack, topic: str, n: int, **extra: Any) -> list[str]:
    ids = []
    for i in range(n):
        r = await stack.http.post("/v1/messages", json={"topic": topic, "body": f"{topic} {i}", **extra})
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    return ids


async def bury(stack: Stack, id_: str) -> None:
    """Dead-letter a pending message the way the ladder's end would."""
    status = stack.service.retry.get(id_)
    assert status is not None
    record = stack.service.retry.pending_record(status.key)
    assert record is not None
    await stack.service.retry.bury(status.key, record.failed(1, "SystemBusy"), "retries exhausted after 1")


async def test_pending_listing_filters_and_pages(down: Stack) -> None:
    a = await spool(down, "A", 5)
    b = await spool(down, "B", 2, type="billing")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"topic": "A", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await down.http.get("/v1/admin/retries", params=params)).json()
        pages += 1
        assert all(item["topic"] == "A" and item["state"] == "SPOOLED" for item in page["items"])
        seen += [item["id"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(a) and pages == 3
    typed = (await down.http.get("/v1/admin/retries", params={"type": "billing"})).json()["items"]
    assert sorted(i["id"] for i in typed) == sorted(b)
    first = typed[0]
    assert first["attempts"] == 0 and first["lastError"] and first["bodyBytes"] == 3 and "body" not in first
    now = down.service.retry.now_ms()
    due = (await down.http.get("/v1/admin/retries", params={"dueBefore": now})).json()["items"]
    assert due == []  # every one waits ten minutes
    later = (await down.http.get("/v1/admin/retries", params={"dueAfter": now + 500_000})).json()
    assert len(later["items"]) == 7 and later["nextCursor"] is None


async def test_scheduled_listing_and_one_message(down: Stack) -> None:
    later = [
        (await down.http.post("/v1/messages", json={"topic": "S", "body": "x", "delayMs": ms})).json()["id"]
        for ms in (3_600_000, 60_000, 7_200_000)
    ]
    await down.http.post("/v1/messages", json={"topic": "Other", "body": "x", "delayMs": 1000})
    items = (await down.http.get("/v1/admin/scheduled", params={"topic": "S"})).json()["items"]
    assert [i["id"] for i in items] == [later[1], later[0], later[2]]  # by due time
    assert items[0]["dueMs"] < items[1]["dueMs"] < items[2]["dueMs"]
    detail = (await down.http.get(f"/v1/admin/messages/{later[0]}")).json()
    assert detail["scheduled"]["state"] == "SCHEDULED" and detail["scheduled"]["topic"] == "S"
    [spooled] = await spool(down, "H", 1)
    detail = (await down.http.get(f"/v1/admin/messages/{spooled}")).json()
    retry = detail["retry"]
    assert retry["state"] == "SPOOLED" and retry["topic"] == "H" and len(retry["history"]) == 1
    assert retry["history"][0]["error"] == retry["lastError"]
    missing = await down.http.get("/v1/admin/messages/NOPE")
    assert missing.status_code == 404 and missing.json()["field"] == "id"
    stats = (await down.http.get("/v1/admin/stats")).json()
    assert stats["retry"]["pending"] == 1 and stats["scheduled"]["pending"] == 4
    assert stats["brokers"] == []  # no route was ever known: no broker seen yet


async def test_redrive_dead_letters_by_id_filter_and_all(down: Stack) -> None:
    ids = await spool(down, "D", 3) + await spool(down, "E", 2)
    for id_ in ids:
        await bury(down, id_)
    dead = (await down.http.get("/v1/admin/retries", params={"state": "dead"})).json()["items"]
    assert sorted(d["id"] for d in dead) == sorted(ids) and dead[0]["reason"] == "retries exhausted after 1"
    r = await down.http.post("/v1/admin/dead-letters:redrive", json={"id": ids[0]})
    assert r.json() == {"redriven": 1, "skipped": 0, "stillDead": 4, "nextCursor": None}
    r = await down.http.post("/v1/admin/dead-letters:redrive", json={"topic": "D"})
    assert r.json() == {"redriven": 2, "skipped": 0, "stillDead": 2, "nextCursor": None}
    assert down.service.retry.stats().dead == 2
    r = await down.http.post("/v1/admin/dead-letters:redrive", json={"all": True})
    assert r.json() == {"redriven": 2, "skipped": 0, "stillDead": 0, "nextCursor": None}
    assert down.service.retry.stats().dead == 0 and down.service.retry.stats().pending == 5
    gone = await down.http.post("/v1/admin/dead-letters:redrive", json={"id": ids[0]})
    assert gone.status_code == 404 and gone.json()["field"] == "id"


async def test_replay_now_delivers_without_waiting_for_the_rung(down: Stack) -> None:
    ids = await spool(down, "R", 4)
    for broker in down.cluster.brokers.values():  # back, but still isolated in the fault table
        await broker.start()
    r = await down.http.post("/v1/admin/retries:replay", json={})
    assert r.status_code == 202 and r.json()["pending"] == 4
    await down.service.recovery.wait()
    await down.service.replay.wait_idle()
    assert down.service.retry.stats().pending == 0
    assert sorted(m.properties["UNIQ_KEY"] for m in down.stored("R")) == sorted(ids)


async def test_purge_needs_confirmation(down: Stack) -> None:
    await spool(down, "P", 3)
    await spool(down, "Q", 2)
    refused = await down.http.post("/v1/admin/retries:purge", json={"state": "pending", "topic": "P"})
    assert refused.status_code == 400 and refused.json()["field"] == "confirm"
    assert down.service.retry.stats().pending == 5
    r = await down.http.post(
        "/v1/admin/retries:purge", params={"confirm": "yes"}, json={"state": "pending", "topic": "P"}
    )
    assert r.json() == {"deleted": 3, "skippedInFlight": 0}
    assert down.service.retry.stats().pending == 2
    left = (await down.http.get("/v1/admin/retries")).json()["items"]
    assert {i["topic"] for i in left} == {"Q"}


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "field"),
    [
        ("get", "/v1/admin/retries", {"params": {"limit": "0"}}, "limit"),
        ("get", "/v1/admin/retries", {"params": {"limit": "many"}}, "limit"),
        ("get", "/v1/admin/retries", {"params": {"cursor": "not a cursor!"}}, "cursor"),
        ("get", "/v1/admin/retries", {"params": {"state": "lost"}}, "state"),
        ("get", "/v1/admin/retries", {"params": {"dueBefore": "-5"}}, "dueBefore"),
        ("get", "/v1/admin/scheduled", {"params": {"colour": "red"}}, "colour"),
        ("post", "/v1/admin/dead-letters:redrive", {"json": {"all": True, "id": "x"}}, "all"),
        ("post", "/v1/admin/dead-letters:redrive", {"json": {}}, "all"),
        ("post", "/v1/admin/dead-letters:redrive", {"json": {"everything": True}}, "everything"),
        ("post", "/v1/admin/dead-letters:redrive", {"json": {"all": 1}}, "all"),  # strict: no 1 for true
        ("post", "/v1/admin/dead-letters:redrive", {"json": {"all": "true"}}, "all"),
        ("post", "/v1/admin/dead-letters:redrive", {"json": {"id": 5}}, "id"),
        ("post", "/v1/admin/dead-letters:redrive", {"json": {"topic": "x y"}}, "topic"),
        ("post", "/v1/admin/retries:replay", {"json": {"topic": ""}}, "topic"),
        # a topic no broker takes (characters, length) replays nothing: not a 202
        ("post", "/v1/admin/retries:replay", {"json": {"topic": "a b"}}, "topic"),
        ("post", "/v1/admin/retries:replay", {"json": {"topic": "X\n"}}, "topic"),
        ("post", "/v1/admin/retries:replay", {"json": {"topic": "X" * 128}}, "topic"),
        ("post", "/v1/admin/retries:replay", {"json": {"topic": 5}}, "topic"),
        (
            "post",
            "/v1/admin/retries:purge",
            {"json": {"state": "pending", "topic": "X Y"}, "params": {"confirm": "yes"}},
            "topic",
        ),
        (
            "post",
            "/v1/admin/retries:purge",
            {"json": {"state": "all"}, "params": {"confirm": "yes"}},
            "state",
        ),
    ],
)
async def test_bad_input_is_a_problem_naming_the_field(
    down: Stack, method: str, path: str, kwargs: dict[str, Any], field: str
) -> None:
    await spool(down, "X", 1)
    r = await getattr(down.http, method)(path, **kwargs)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json" and r.json()["field"] == field
    assert down.service.retry.stats().pending == 1  # nothing changed


@pytest.mark.parametrize("bad", [" 5", "5", True, 5.5, -1, 10**19, [5]])
@pytest.mark.parametrize("name", ["dueAfter", "dueBefore"])
async def test_a_purge_refuses_what_is_no_time_and_deletes_nothing(down: Stack, name: str, bad: Any) -> None:
    """README: bad input is a 400 naming the field and changes nothing; types are strict. Parsed leniently,
    ``"dueAfter": true`` was 1 (epoch ms) and " 5" was 5: every pending message deleted for good."""
    (kept,) = await spool(down, "T", 1)
    r = await down.http.post(
        "/v1/admin/retries:purge", params={"confirm": "yes"}, json={"state": "pending", name: bad}
    )
    assert (r.status_code, r.json().get("field"), r.json().get("deleted")) == (400, name, None), r.text
    still = await down.http.get(f"/v1/messages/{kept}")
    assert still.status_code == 200 and still.json()["status"] == "SPOOLED"


async def test_a_purge_takes_a_time_without_a_fraction_as_json_schema_s_integer(down: Stack) -> None:
    """6926.0 is an integer to JSON Schema (a generated client may send it), as the send API takes it."""
    await spool(down, "T", 1)
    r = await down.http.post(
        "/v1/admin/retries:purge", params={"confirm": "yes"}, json={"state": "pending", "dueBefore": 5.0}
    )
    assert r.json() == {"deleted": 0, "skippedInFlight": 0}  # nothing was due before 5 ms past the epoch
    r = await down.http.post(
        "/v1/admin/retries:purge", params={"confirm": "yes"}, json={"state": "pending", "dueAfter": 5.0}
    )
    assert r.json() == {"deleted": 1, "skippedInFlight": 0}


async def test_admin_needs_the_token(make_stack: Callable[..., Any]) -> None:
    async with make_stack(auth_token="s3cret") as stack:
        assert (await stack.http.get("/v1/admin/stats")).status_code == 200
        del stack.http.headers["authorization"]
        r = await stack.http.post("/v1/admin/retries:replay", json={})
        assert r.status_code == 401 and r.json()["field"] == "Authorization"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/admin/retries", "limit"),  # a bounded count
        ("/v1/admin/retries", "dueAfter"),  # an epoch millisecond
        ("/v1/admin/retries", "dueBefore"),
        ("/v1/admin/scheduled", "limit"),
        ("/v1/admin/scheduled", "dueAfter"),
    ],
)
@pytest.mark.parametrize("value", ["\uff11", "\u0663", "1_0", " 5", "+5", "5\n", "9" * 20])
async def test_numeric_query_parameters_take_ascii_digits_only(
    down: Stack, path: str, name: str, value: str
) -> None:
    # int() takes all of these (full-width and Arabic-Indic digits, underscores, signs, spaces)
    r = await down.http.get(path, params={name: value})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json" and r.json()["field"] == name
    assert (await down.http.get(path, params={name: "5"})).status_code == 200
