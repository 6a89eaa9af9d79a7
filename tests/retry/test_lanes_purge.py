"""The admin purge by filter over lanes (retry.admin.purge, what ``POST /v1/admin/retries:purge?confirm=yes``
and its state ``pending`` run) with more than one chunk: a purged head's next one must not escape.

README, admin section: purge ``{"state": "pending", "topic", ...}``: "delete for good (pending: the
waiting ones too, as listed; a key's first one purged lets its next go)". The purge walks the pending
listing a chunk (PURGE_CHUNK, 1 000) at a time, by next attempt, then the waiting messages. A lane's head
purged in a chunk lets its next one go: it is moved to pending, due now, under a key that sorts before
the chunk's cursor when the chunk reached messages due later than now (the ladder's rungs: the usual
case after an outage). The walk never comes back to it, and it is no longer among the waiting ones: it
survives the purge of its topic and is delivered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rocksidecar.retry.admin import PURGE_CHUNK, purge
from rocksidecar.retry.keys import COLUMN_FAMILIES
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.message import StoredMessage
from rocksidecar.storage.query import Filter
from tests.fakes import FakeWallClock

TOPIC = "Orders"


def spooled(id_: str, sharding_key: str | None) -> RetryRecord:
    msg = StoredMessage(id_, TOPIC, b"body", sharding_key=sharding_key, type="orders", created_ms=1)
    return RetryRecord.of(msg)


@pytest.fixture
async def store() -> AsyncIterator[RetryStore]:
    clock = FakeWallClock()
    kv = MemoryKV(COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    retry = RetryStore(kv, writer=writer, now_ms=clock.now_ms, clock=clock.monotonic)
    yield retry
    await retry.close()
    await writer.close()


async def test_a_purge_of_a_topic_deletes_the_next_of_a_lane_whose_head_it_purged_in_an_earlier_chunk(
    store: RetryStore,
) -> None:
    """A key's head (next attempt in 3 s) with two messages waiting behind it, and PURGE_CHUNK unkeyed
    messages of the topic due in 5 s: more than one chunk. Purging the topic's pending messages purges
    the head in the first chunk, which moves w1 to pending (due now, before the chunk's cursor); the
    second chunk and the waiting part (w2) never see it. It is left pending and would be delivered.
    Expected: every pending and waiting message of the topic deleted (README admin section: purge deletes
    the waiting ones too)."""
    now = store.now_ms()
    await store.spool(spooled("head", "customer-7"), now + 3_000)
    await store.spool_many([spooled("w1", "customer-7"), spooled("w2", "customer-7")])  # behind the head
    await store.spool_many([spooled(f"u{i:04d}", None) for i in range(PURGE_CHUNK)], now + 5_000)
    assert store.pending_count == PURGE_CHUNK + 3
    deleted, skipped = await purge(store, "pending", Filter(topic=TOPIC), in_flight=lambda _key: False)
    left = store.get("w1")
    assert left is None, f"w1 survived the purge of its topic: {left}"
    assert (deleted, skipped, store.pending_count, store.lanes_open) == (PURGE_CHUNK + 3, 0, 0, 0)


async def test_the_same_purge_within_one_chunk_deletes_the_whole_lane(store: RetryStore) -> None:
    """Control: the same lane with fewer messages than a chunk is purged whole (the head and its waiting
    ones in one store.purge): only the walk across chunks loses the promoted one."""
    now = store.now_ms()
    await store.spool(spooled("head", "customer-7"), now + 3_000)
    await store.spool_many([spooled("w1", "customer-7"), spooled("w2", "customer-7")])
    await store.spool_many([spooled(f"u{i:04d}", None) for i in range(10)], now + 5_000)
    deleted, _ = await purge(store, "pending", Filter(topic=TOPIC), in_flight=lambda _key: False)
    assert (deleted, store.pending_count, store.get("w1")) == (13, 0, None)
