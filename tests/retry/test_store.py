"""RetryStore state changes, status queries, durability across reopen and write-failure propagation."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
import pytest

from rocksidecar.retry.keys import DEAD_CF, META_CF, PENDING_CF, id_of, parse_pending_key
from rocksidecar.retry.record import RetryRecord, decode_record
from rocksidecar.retry.status import State
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.errors import StorageError, StoreLockedError
from rocksidecar.storage.kv import Put
from tests.fakes import FakeWallClock
from tests.retry.conftest import GatedWrites, Harness, record


async def test_spool_then_get_reports_spooled(h: Harness) -> None:
    now = h.store.now_ms()
    key = await h.store.spool(record("M1", first_failure_ms=now, last_error="SystemBusy"), now + 3000)
    status = h.store.get("M1")
    assert status is not None
    assert (status.state, status.key, status.next_attempt_at_ms) == (State.SPOOLED, key, now + 3000)
    assert (status.attempts, status.last_error) == (0, "SystemBusy")
    stats = h.store.stats()
    assert (stats.pending, stats.dead, stats.oldest_due_ms, stats.oldest_first_failure_ms) == (
        1,
        0,
        now + 3000,
        now,
    )
    assert h.store.due(b"", now + 2999, 10) == []
    assert [k for k, _ in h.store.due(b"", now + 3000, 10)] == [key]
    assert h.store.get("unknown") is None


async def test_spool_defaults_to_due_now_and_type_to_topic(h: Harness) -> None:
    key = await h.store.spool(record("M1", topic="payments"))
    parsed = parse_pending_key(key)
    assert parsed.due_ms == h.store.now_ms()
    assert parsed.type == "payments"


async def test_reschedule_moves_the_key_and_the_index_in_one_batch(h: Harness) -> None:
    old = await h.store.spool(record("M1"), 1000)
    writes = h.kv.writes
    rec = record("M1").failed(2000, "boom")
    new = await h.store.reschedule(old, rec, 9000)
    assert h.kv.writes == writes + 1  # one atomic batch
    assert h.kv.get(PENDING_CF, old) is None
    assert decode_record(h.kv.get(PENDING_CF, new) or b"") == rec
    status = h.store.get("M1")
    assert status is not None
    assert (status.key, status.next_attempt_at_ms, status.attempts) == (new, 9000, 1)
    assert h.store.pending_count == 1


async def test_ack_deletes_key_and_index(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    await h.store.ack(key)
    assert h.store.get("M1") is None
    assert h.kv.scan(PENDING_CF) == []
    assert h.store.stats().pending == 0
    assert h.store.stats().oldest_due_ms is None


async def test_bury_keeps_history_and_reason(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    rec = record("M1").failed(10, "e1").failed(20, "e2")
    dkey = await h.store.bury(key, rec, "retries exhausted")
    status = h.store.get("M1")
    assert status is not None
    assert (status.state, status.key, status.reason, status.attempts) == (
        State.DEAD,
        dkey,
        "retries exhausted",
        2,
    )
    [letter] = h.store.dead.page()
    assert letter.record is not None and letter.record.history == ((10, "e1"), (20, "e2"))
    assert h.dead == [letter]  # the dead-letter hook saw it
    assert (h.store.stats().pending, h.store.stats().dead) == (0, 1)


async def test_quarantine_keeps_corrupt_bytes(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    await h.store.quarantine(key, b"\x07garbage", "corrupt value: bad")
    [letter] = h.store.dead.page()
    assert (letter.record, letter.raw, letter.id) == (None, b"\x07garbage", "M1")
    status = h.store.get("M1")
    assert status is not None and status.state is State.DEAD
    assert "raw_base64" in letter.to_json()


async def test_corrupt_pending_value_is_reported_not_raised(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    h.kv.write([Put(PENDING_CF, key, b"\xffnot a record")], sync=True)
    status = h.store.get("M1")
    assert status is not None and status.last_error.startswith("corrupt value")
    assert h.store.stats().oldest_first_failure_ms is None


async def test_a_failed_write_propagates_and_marks_the_store_unhealthy(h: Harness) -> None:
    h.kv.write_fault = "IO error: No space left on device"
    with pytest.raises(StorageError, match="No space left"):
        await h.store.spool(record("M1"))
    assert not h.store.healthy
    assert "No space left" in (h.store.stats().last_error or "")
    assert h.store.get("M1") is None
    assert h.store.pending_count == 0
    h.kv.write_fault = None
    await h.store.spool(record("M1"))
    assert h.store.healthy


async def test_a_failed_sync_fails_the_caller(h: Harness) -> None:
    h.kv.sync_fault = "IO error: fsync failed"
    with pytest.raises(StorageError, match="fsync"):
        await h.store.spool(record("M1"))
    assert not h.store.stats().healthy


async def test_listener_sees_committed_keys_only(h: Harness) -> None:
    seen: list[bytes] = []
    h.store.queue.add_listener(seen.append)
    key = await h.store.spool(record("M1"))
    h.kv.write_fault = "boom"
    with pytest.raises(StorageError):
        await h.store.spool(record("M2"))
    assert seen == [key]


async def test_hook_failures_never_lose_the_dead_letter(h: Harness) -> None:
    async def broken(_: object) -> None:
        raise RuntimeError("webhook down")

    store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, on_dead_letter=broken)
    key = await store.spool(record("M1"))
    await store.bury(key, record("M1"), "final")
    assert [d.reason for d in store.dead.page()] == ["final"]
    await store.close()


async def test_redrive_moves_back_with_retry_count_reset(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    dkey = await h.store.bury(key, record("M1").failed(5, "e").failed(6, "e"), "exhausted")
    h.clock.advance(60)
    new = await h.store.redrive(dkey)
    parsed = parse_pending_key(new)
    assert (parsed.retry_count, parsed.due_ms) == (0, h.store.now_ms())
    rec = h.store.pending_record(new)
    assert rec is not None and rec.retry_count == 0 and len(rec.history) == 2
    assert h.store.dead.page() == []
    status = h.store.get("M1")
    assert status is not None and status.state is State.SPOOLED
    with pytest.raises(KeyError):
        await h.store.redrive(dkey)


async def _second_while_the_first_commits(
    h: Harness,
    monkeypatch: pytest.MonkeyPatch,
    first: Callable[[], Awaitable[object]],
    second: Callable[[], Awaitable[object]],
) -> list[object]:
    """Run ``second`` while ``first``'s batch waits to be written (behind a slow WAL sync): the letter is
    still in the KV then. Returns both outcomes (an exception as a value)."""
    gated = GatedWrites(h.store.writer)
    monkeypatch.setattr(h.store.writer, "write", gated)
    one = asyncio.create_task(first())
    await gated.until_arrived(1)
    two = asyncio.create_task(second())
    queued = asyncio.create_task(gated.until_arrived(2))
    # The second call answers at once, or (the race) queues a batch of its own: whichever comes first.
    await asyncio.wait({two, queued}, return_when=asyncio.FIRST_COMPLETED)
    queued.cancel()
    gated.gate.set()
    return await asyncio.gather(one, two, return_exceptions=True)


async def test_two_redrives_of_one_letter_at_once_move_it_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await h.store.spool(record("M1"))
    dkey = await h.store.bury(key, record("M1"), "exhausted")
    first, second = await _second_while_the_first_commits(
        h, monkeypatch, lambda: h.store.redrive(dkey), lambda: h.store.redrive(dkey)
    )
    assert isinstance(first, bytes) and isinstance(second, KeyError), (first, second)
    assert [k for k, _ in h.kv.scan(PENDING_CF)] == [first]  # one row: delivered once
    assert (h.store.pending_count, h.store.dead_count) == (1, 0)


async def test_a_purge_while_a_redrive_commits_leaves_the_letter_to_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await h.store.spool(record("M1"))
    dkey = await h.store.bury(key, record("M1"), "exhausted")
    moved, purged = await _second_while_the_first_commits(
        h, monkeypatch, lambda: h.store.redrive(dkey), lambda: h.store.purge(dead=[dkey])
    )
    assert isinstance(moved, bytes) and purged == 0, (moved, purged)
    assert [k for k, _ in h.kv.scan(PENDING_CF)] == [moved]
    assert (h.store.pending_count, h.store.dead_count) == (1, 0)


async def test_two_purges_of_one_pending_key_at_once_count_it_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await h.store.spool(record("M1"), h.store.now_ms() + 60_000)
    await h.store.spool(record("M2"), h.store.now_ms() + 60_000)
    first, second = await _second_while_the_first_commits(
        h, monkeypatch, lambda: h.store.purge(pending=[key]), lambda: h.store.purge(pending=[key])
    )
    assert (first, second) == (1, 0)  # the first one's claim keeps the second off the key
    assert [id_of(k) for k, _ in h.kv.scan(PENDING_CF)] == ["M2"]
    assert h.store.pending_count == 1


async def test_a_purge_counts_a_key_named_twice_once(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    await h.store.spool(record("M2"))
    assert await h.store.purge(pending=[key, key]) == 1
    assert h.store.pending_count == 1


async def test_a_purge_leaves_a_claimed_pending_key_to_its_owner(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    assert h.store.queue.claim(key)  # a replay worker delivering it
    assert await h.store.purge(pending=[key]) == 0
    assert h.store.queue.is_claimed(key)  # still the worker's
    assert (h.kv.get(PENDING_CF, key) is not None, h.store.pending_count) == (True, 1)


async def test_a_withdrawal_writes_the_caller_s_record_with_it_or_not_at_all(h: Harness) -> None:
    # ``also`` (Rock-DMQ's "cancelled" record) goes with a withdrawal that took every key back, in its
    # batch; with a key in a replay's hands the message may still be sent: the record is not written.
    mark = Put(META_CF, b"caller's record", b"")  # any column family the store has
    key = await h.store.spool(record("M1"))
    assert h.store.queue.claim(key)
    assert await h.store.withdraw("M1", [mark]) is False
    assert h.kv.get(META_CF, mark.key) is None and h.kv.get(PENDING_CF, key) is not None
    h.store.queue.release([key])
    assert await h.store.withdraw("M1", [mark]) is True
    assert h.kv.get(META_CF, mark.key) == b"" and h.kv.get(PENDING_CF, key) is None
    assert await h.store.withdraw("M1", [mark]) is False  # nothing left to take back


async def test_a_failed_purge_gives_its_keys_back_to_the_replay(h: Harness) -> None:
    key = await h.store.spool(record("M1"))
    seen: list[bytes] = []
    h.store.queue.add_listener(seen.append)
    h.kv.write_fault = "IO error: No space left on device"
    with pytest.raises(StorageError):
        await h.store.purge(pending=[key])
    assert not h.store.queue.is_claimed(key)
    assert seen == [key]  # the seek loop, which may have passed it while it was claimed, reads it again
    assert (h.kv.get(PENDING_CF, key) is not None, h.store.pending_count) == (True, 1)


async def test_two_letters_of_one_message_re_driven_in_one_millisecond_are_both_stored_and_counted(
    h: Harness,
) -> None:
    # the same message spooled twice (e.g. a delayed message published again after a crash), both died
    for due in (1000, 2000):
        key = await h.store.spool(record("M1"), h.store.now_ms() + due)
        await h.store.bury(key, record("M1").failed(1, "topic gone"), "not redeliverable")
        h.clock.advance(0.01)
    assert (h.store.pending_count, h.store.dead_count) == (0, 2)
    assert await h.store.dead.redrive_id("M1") == 2  # together (gather), in one millisecond
    keys = [k for k, _ in h.kv.scan(PENDING_CF)]
    # one key for both would be one row counted twice: each gets its own (the second 1 ms later)
    assert [parse_pending_key(k).due_ms - h.store.now_ms() for k in keys] == [0, 1]
    assert (h.store.pending_count, h.store.dead_count, h.kv.scan(DEAD_CF)) == (2, 0, [])


async def test_redrive_by_id_and_all_skip_corrupt_letters(h: Harness) -> None:
    for i in range(3):
        key = await h.store.spool(record(f"M{i}"))
        await h.store.bury(key, record(f"M{i}"), "x")
    key = await h.store.spool(record("BAD"))
    await h.store.quarantine(key, b"junk", "corrupt value")
    assert await h.store.dead.redrive_id("M1") == 1
    assert await h.store.dead.redrive_all() == (2, 1)
    assert [d.id for d in h.store.dead.page()] == ["BAD"]
    assert h.store.pending_count == 3


async def test_export_json_lines(h: Harness) -> None:
    for id_, reason in (("T1", "r1"), ("T2", "r2")):
        key = await h.store.spool(record(id_))
        await h.store.bury(key, record(id_), reason)
    out = io.StringIO()
    assert h.store.dead.export(out) == 2
    docs = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["id"], d["reason"], d["body_text"]) for d in docs] == [
        ("T1", "r1", "body of T1"),
        ("T2", "r2", "body of T2"),
    ]
    assert base64.b64decode(docs[0]["body_base64"]) == b"body of T1"


async def test_binary_body_export_has_no_text(h: Harness) -> None:
    rec = RetryRecord(id="B1", topic="t", body=b"\xff\xfe")
    key = await h.store.spool(rec)
    await h.store.bury(key, rec, "r")
    doc = h.store.dead.page()[0].to_json()
    assert doc["body_text"] is None
    assert doc["body_base64"] == "//4="


async def test_rocks_store_is_durable_across_reopen_and_restores_the_clock(tmp_path: Path) -> None:
    clock = FakeWallClock(start_ms=5_000_000)
    store = RetryStore.open(tmp_path / "store", now_ms=clock.now_ms, clock=clock.monotonic)
    with pytest.raises(StoreLockedError):
        RetryStore.open(tmp_path / "store")
    keys = [await store.spool(record(f"M{i}")) for i in range(5)]
    await store.bury(keys[0], record("M0"), "dead")
    await store.close()
    clock.step_wall(-3_600_000)  # the host clock went back an hour while we were down
    store = RetryStore.open(tmp_path / "store", now_ms=clock.now_ms, clock=clock.monotonic)
    try:
        assert store.now_ms() >= 5_000_000
        assert (store.pending_count, store.dead_count) == (4, 1)
        assert [k for k, _ in store.due(b"", store.now_ms(), 10)] == keys[1:]
        status = store.get("M0")
        assert status is not None and status.state is State.DEAD
        assert store.kv.count(DEAD_CF) == 1
    finally:
        await store.close()


async def test_a_shared_writer_outlives_the_store(h: Harness) -> None:
    from rocksidecar.storage.group_commit import GroupCommitWriter

    shared = GroupCommitWriter(h.kv)
    store = RetryStore(h.kv, now_ms=h.clock.now_ms, clock=h.clock.monotonic, writer=shared)
    await store.spool(record("M1"))
    await store.close()
    await shared.write([Put(PENDING_CF, b"other", b"v")])  # e.g. the idempotency store's writes
    assert h.kv.get(PENDING_CF, b"other") == b"v"
    await shared.close()


async def test_spool_many_is_one_batch_all_or_none(h: Harness) -> None:
    seen: list[bytes] = []
    h.store.queue.add_listener(seen.append)
    writes = h.kv.writes
    keys = await h.store.spool_many([record(f"M{i}", topic=t) for i, t in enumerate("zay")], 5000)
    assert h.kv.writes == writes + 1
    assert seen == [min(keys)]  # one notification with the smallest key
    assert [h.store.get(f"M{i}") is not None for i in range(3)] == [True] * 3
    h.kv.write_fault = "disk full"
    with pytest.raises(StorageError):
        await h.store.spool_many([record("X1"), record("X2")])
    assert h.store.get("X1") is None and h.store.get("X2") is None
    assert h.store.pending_count == 3
    assert await h.store.spool_many([]) == []
