"""The metrics report what their help text says (a review found three that did not):

- ``rocksidecar_send_latency_seconds`` ("Time to send one message or batch to RocketMQ, retries
  included") is one observation per send or batch, covering every attempt of it; it was one per attempt,
  each with that attempt's time alone.
- ``rocksidecar_delay_lateness_seconds`` ("How late delayed messages were published after their due
  time") is observed for a delayed message when it is published: not when its publish failed and it was
  spooled into the retry store, but when the replay publishes it in the end, late by all that time.
- ``rocksidecar_retry_oldest_age_seconds`` ("Age of the oldest message in the retry store (since its first
  failure)") and /v1/admin/stats' ``oldestAgeS`` follow the oldest pending message, not the one due next:
  a fresh failure (due soonest) no longer drops them to ~0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from rocksidecar.retry import oldest
from rocksidecar.retry.keys import COLUMN_FAMILIES
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord, decode_record, encode_record
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.memory import MemoryKV
from tests.app.conftest import Stack
from tests.fakes import FakeWallClock
from tests.retry.conftest import record


async def until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait for the service's or devbroker's state (changed by other tasks that expose no event)."""
    async with asyncio.timeout(timeout_s):
        while not done():  # noqa: ASYNC110 - the state lives in another component with no event
            await asyncio.sleep(0.02)


# --- send latency ----------------------------------------------------------------------------------


def _latency(stack: Stack) -> tuple[float, float]:
    reg = stack.service.metrics.registry
    count = reg.get_sample_value("rocksidecar_send_latency_seconds_count") or 0.0
    total = reg.get_sample_value("rocksidecar_send_latency_seconds_sum") or 0.0
    return count, total


async def test_send_latency_is_one_observation_per_send_retries_included(stack: Stack) -> None:
    """A send whose first two attempts fail (0.2 s each) and whose third succeeds: one observation, of all
    three attempts' time (it was three observations of 0.2 s)."""
    r = await stack.http.post("/v1/messages", json={"topic": "Lat", "body": "warm"})  # route known
    assert r.status_code == 200, r.text
    count0, sum0 = _latency(stack)
    for broker in stack.cluster.brokers.values():
        broker.faults.fail_next_sends(1)
        broker.faults.latency_s = 0.2
    r = await stack.http.post("/v1/messages", json={"topic": "Lat", "body": "one send"})
    assert r.status_code == 200, r.text
    count, total = _latency(stack)
    assert count - count0 == 1, f"one send observed {count - count0} times"
    assert total - sum0 >= 0.4, f"a send of three 0.2 s attempts observed as {total - sum0:.3f} s"


async def test_send_latency_is_one_observation_per_batch(stack: Stack) -> None:
    """A batch of ten messages (over several queues: several SEND_BATCH_MESSAGEs) is one observation."""
    r = await stack.http.post("/v1/messages", json={"topic": "LatB", "body": "warm"})
    assert r.status_code == 200, r.text
    count0, _ = _latency(stack)
    batch = {"messages": [{"topic": "LatB", "body": f"m{i}", "shardingKey": f"k{i}"} for i in range(10)]}
    r = await stack.http.post("/v1/messages:batch", json=batch)
    assert r.status_code == 200, r.text
    count, _ = _latency(stack)
    assert count - count0 == 1


async def test_a_failed_send_is_one_observation_too(make_stack: Any) -> None:
    """Every attempt failing (the message spooled): still one send, one observation."""
    async with make_stack(retry_default=RetryPolicy((600.0,), 1000)) as stack:
        r = await stack.http.post("/v1/messages", json={"topic": "LatF", "body": "warm"})
        assert r.status_code == 200, r.text
        count0, _ = _latency(stack)
        for broker in stack.cluster.brokers.values():
            broker.faults.fail_all_sends()
        r = await stack.http.post("/v1/messages", json={"topic": "LatF", "body": "x"})
        assert r.status_code == 202 and r.json()["status"] == "SPOOLED", r.text
        count, _ = _latency(stack)
        assert count - count0 == 1


# --- delay lateness --------------------------------------------------------------------------------


async def test_a_delayed_message_is_observed_late_when_the_replay_publishes_it(make_stack: Any) -> None:
    """Due, its publish failed: spooled, not observed. Published by the replay once a broker takes it
    again: observed once, as late as it really went out (it was observed on time at the failure)."""
    async with make_stack(retry_default=RetryPolicy((0.3,), 1000)) as stack:
        reg = stack.service.metrics.registry
        for broker in stack.cluster.brokers.values():
            broker.faults.fail_all_sends()
        r = await stack.http.post("/v1/messages", json={"topic": "Late", "body": "x", "delayMs": 100})
        assert r.status_code == 202, r.text
        await until(lambda: stack.service.retry.pending_count > 0)
        assert stack.stored("Late") == []  # on no broker: it waits in the retry store
        assert reg.get_sample_value("rocksidecar_delay_lateness_seconds_count") == 0
        await asyncio.sleep(1.0)  # late by over a second now
        for broker in stack.cluster.brokers.values():
            broker.faults.clear()
        await until(lambda: bool(stack.stored("Late")))
        await until(lambda: bool(reg.get_sample_value("rocksidecar_delay_lateness_seconds_count")))
        assert reg.get_sample_value("rocksidecar_delay_lateness_seconds_count") == 1
        late = reg.get_sample_value("rocksidecar_delay_lateness_seconds_sum")
        assert late is not None and late >= 1.0, f"published over 1 s late, observed {late} s late"


def test_a_retry_record_keeps_the_due_time_of_the_delayed_message_it_was() -> None:
    rec = RetryRecord.of(record("D1"), error="busy", failed_at_ms=5)
    assert decode_record(encode_record(rec)).delay_due_ms == 0
    assert b"delay_due" not in encode_record(rec)  # the others' bytes as before
    delayed = RetryRecord(**{**{f: getattr(rec, f) for f in rec.__dataclass_fields__}, "delay_due_ms": 1234})
    assert decode_record(encode_record(delayed)) == delayed
    assert decode_record(encode_record(delayed.failed(9, "again"))).delay_due_ms == 1234


# --- oldest age ------------------------------------------------------------------------------------


async def test_the_oldest_age_is_the_oldest_messages_not_the_next_due(make_stack: Any) -> None:
    """An old message on a long rung (next try in 600 s) and a fresh failure (due in 0.3 s): the gauge
    and the admin stats tell the old one's age (they told the fresh one's, ~0)."""
    async with make_stack(retry_default=RetryPolicy((0.3, 600.0), 1000)) as stack:
        reg = stack.service.metrics.registry
        for broker in stack.cluster.brokers.values():
            broker.faults.fail_all_sends()
        r = await stack.http.post("/v1/messages", json={"topic": "Age", "body": "old"})
        assert r.status_code == 202, r.text
        old = r.json()["id"]
        # its first replay failed too: next try in 600 s
        await until(lambda: (stack.service.retry.get(old).attempts or 0) >= 2)  # type: ignore[union-attr]
        await asyncio.sleep(1.0)
        r = await stack.http.post("/v1/messages", json={"topic": "Age", "body": "new"})
        assert r.status_code == 202, r.text
        st = stack.service.retry
        rec = st.pending_record(st.get(old).key)  # type: ignore[union-attr]
        assert rec is not None and rec.first_failure_ms
        oldest_age = (st.now_ms() - rec.first_failure_ms) / 1000
        gauge = reg.get_sample_value("rocksidecar_retry_oldest_age_seconds")
        assert gauge is not None and gauge >= oldest_age - 0.1, (
            f"oldest message failed first {oldest_age:.2f} s ago; the gauge says {gauge:.2f} s"
        )
        stats = (await stack.http.get("/v1/admin/stats")).json()["retry"]
        assert stats["oldestAgeS"] >= oldest_age - 0.1
        assert stats["oldestFirstFailureMs"] == rec.first_failure_ms


def _store(clock: FakeWallClock, kv: MemoryKV | None = None) -> RetryStore:
    return RetryStore(
        kv or MemoryKV(COLUMN_FAMILIES), now_ms=clock.now_ms, clock=clock.monotonic
    )  # owns its writer


async def test_the_store_follows_its_oldest_pending_message_through_every_change() -> None:
    """Spool, reschedule, ack, bury, redrive and purge each tell the store's oldest first failure."""
    clock = FakeWallClock(1_000_000)
    store = _store(clock)
    old = await store.spool(record("OLD", first_failure_ms=1_000_000), 1_900_000)  # due last
    new = await store.spool(record("NEW", first_failure_ms=1_500_000), 1_000_100)  # due first
    assert store.stats().oldest_due_ms == 1_000_100
    assert store.stats().oldest_first_failure_ms == 1_000_000  # not NEW's, the next due
    rec = store.pending_record(old)
    assert rec is not None
    old = await store.reschedule(old, rec.failed(1_600_000, "again"), 1_950_000)  # keeps its first failure
    assert store.stats().oldest_first_failure_ms == 1_000_000
    spooled = await store.spool(record("SPOOLED", created_ms=1_200_000))  # ack=spool: never failed
    assert store.stats().oldest_first_failure_ms == 1_000_000
    dkey = await store.bury(old, rec.failed(1_600_000, "last"), "exhausted")
    assert store.stats().oldest_first_failure_ms == 1_200_000  # SPOOLED's creation
    await store.ack(spooled)
    assert store.stats().oldest_first_failure_ms == 1_500_000
    await store.redrive(dkey)  # OLD is back
    assert store.stats().oldest_first_failure_ms == 1_000_000
    assert await store.withdraw("OLD")
    assert store.stats().oldest_first_failure_ms == 1_500_000
    assert await store.purge(pending=[new]) == 1
    assert store.stats().oldest_first_failure_ms is None
    await store.close()


async def test_the_oldest_is_rebuilt_at_open_and_merged_with_changes_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At open the pending records are scanned: at once (a small store) or in the background (a large
    one, here any), the scan's snapshot merged with what changed since."""
    clock = FakeWallClock(2_000_000)
    kv = MemoryKV(COLUMN_FAMILIES)
    first = _store(clock, kv)
    keys = [
        await first.spool(record(f"M{i}", first_failure_ms=1_000_000 + i * 1000), 3_000_000 - i)
        for i in range(5)
    ]
    await first.close()
    second = _store(clock, kv)
    assert second.stats().oldest_first_failure_ms == 1_000_000  # sync scan at open
    await second.close()

    monkeypatch.setattr("rocksidecar.retry.store.SYNC_SCAN_LIMIT", 0)
    started = asyncio.Event()
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    real_tally = oldest._tally

    def slow_tally(values: Any, stop: Any) -> Any:
        rows = list(values)  # the snapshot, taken before the changes below
        loop.call_soon_threadsafe(started.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        return real_tally(rows, stop)

    monkeypatch.setattr(oldest, "_tally", slow_tally)
    reopened = _store(clock, kv)
    await started.wait()
    await reopened.ack(keys[0])  # M0, the oldest, delivered while the scan runs
    await reopened.spool(record("LATE", first_failure_ms=1_500_000), 3_500_000)
    # meanwhile: never older than a pending message (the next due's, M4, or what changed since)
    assert reopened.stats().oldest_first_failure_ms == 1_004_000
    release.set()
    assert await asyncio.to_thread(reopened.wait_counted, 10)
    assert reopened.stats().oldest_first_failure_ms == 1_001_000  # M1: exact again
    await reopened.close()


def test_the_tally_is_a_count_per_second_not_per_message() -> None:
    ages = oldest.OldestPending()
    for ms in (10_500, 10_100, 10_900, 12_000):
        ages.add(ms)
    assert ages.oldest() == 10_100
    ages.remove(10_100)  # the second's earliest gone: its first time added stays a lower bound
    assert ages.oldest() == 10_100
    ages.remove(10_500)
    ages.remove(10_900)
    assert ages.oldest() == 12_000
    assert len(ages._seconds) == 1


def test_a_second_told_a_removal_before_the_scan_s_count_is_found_once_merged() -> None:
    """A message of the open store's removed (replayed) before the background scan's count arrived: its
    second holds -1, then the scan's +2: the other message of that second is still the oldest (the
    second was left off the heap, and the oldest answered a younger message)."""
    ages = oldest.OldestPending()
    ages.add(9_000_500)  # a new failure after the open
    ages.remove(5_000_100)  # one of the scanned ones, delivered before the scan was merged
    ages._merge({5_000: [2, 5_000_100]})  # the scan: two messages in second 5 000
    assert ages.oldest() == 5_000_100
