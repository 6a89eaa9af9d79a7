"""Offset stores: remote on devbroker (QUERY/UPDATE_CONSUMER_OFFSET), local file (atomic, reloadable)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.consumer import offset_store as offset_store_module
from rocksidecar.rmq.consumer.offset_store import (
    LocalFileOffsetStore,
    ReadType,
    RemoteOffsetStore,
    default_offsets_path,
    write_atomically,
)
from rocksidecar.rmq.errors import ClientError
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.pool import RemotingClient


async def test_remote_store_round_trip_on_devbroker(cluster: DevCluster, client: RemotingClient) -> None:
    api = BrokerApi(client)
    addrs = {name: b.addr for name, b in cluster.brokers.items()}

    async def find(name: str) -> str | None:
        return addrs.get(name)

    mq = MessageQueue("OffsetsT", "broker-a", 1)
    await api.send(addrs["broker-a"], mq, Message("OffsetsT", b"x"), new_uniq_id(), 3.0)
    store = RemoteOffsetStore(api, "G1", find)
    await store.load()
    assert await store.read(mq, ReadType.MEMORY) is None
    store.update(mq, 7, increase_only=True)
    store.update(mq, 5, increase_only=True)  # a slower message finishing late never rolls back
    assert await store.read(mq, ReadType.MEMORY) == 7
    await store.persist_all([mq])
    assert cluster.brokers["broker-a"].offsets.query("G1", "OffsetsT", 1) == 7

    other = RemoteOffsetStore(api, "G1", find)  # another member of the group, after a rebalance
    assert await other.read(mq, ReadType.MEMORY_THEN_STORE) == 7
    store.update(mq, 3, increase_only=False)  # an explicit reset may go back
    await store.persist(mq)
    assert await other.read(mq, ReadType.STORE) == 3


async def test_remote_store_persists_only_the_given_queues_and_survives_a_missing_broker(
    cluster: DevCluster, client: RemotingClient
) -> None:
    api = BrokerApi(client)
    addr = cluster.brokers["broker-a"].addr

    async def find(name: str) -> str | None:
        return addr if name == "broker-a" else None

    store = RemoteOffsetStore(api, "G2", find)
    kept, gone, lost = (
        MessageQueue("T2", "broker-a", 0),
        MessageQueue("T2", "broker-a", 1),
        MessageQueue("T2", "broker-x", 0),
    )
    for mq in (kept, gone, lost):
        store.update(mq, 4, increase_only=True)
    await store.persist_all([kept, lost])  # broker-x is unknown: logged, the others still persist
    offsets = cluster.brokers["broker-a"].offsets
    assert offsets.query("G2", "T2", 0) == 4
    assert offsets.query("G2", "T2", 1) is None
    with pytest.raises(ClientError):
        await store.persist(lost)


async def test_local_file_store_reloads_what_it_persisted(tmp_path: Path) -> None:
    path = default_offsets_path("10.0.0.1@1#2", "BG", tmp_path)
    assert path == tmp_path / "10.0.0.1@1#2" / "BG" / "offsets.json"
    store = LocalFileOffsetStore(path)
    await store.load()  # no file yet
    mqs = [MessageQueue("T", "broker-a", i) for i in range(3)]
    for i, mq in enumerate(mqs):
        store.update(mq, 10 * i, increase_only=True)
    await store.persist_all(mqs)
    again = LocalFileOffsetStore(path)
    await again.load()
    assert [await again.read(mq, ReadType.MEMORY) for mq in mqs] == [0, 10, 20]
    assert not path.with_name("offsets.json.tmp").exists()


async def test_local_file_store_keeps_a_removed_queue_in_the_file(tmp_path: Path) -> None:
    """A queue dropped and added again (an illegal offset corrected) reads its progress back from the
    file, even when another queue's progress was written in between (Java's removeOffset is empty)."""
    store = LocalFileOffsetStore(tmp_path / "offsets.json")
    moved, other = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)
    store.update(moved, 40, increase_only=False)
    await store.persist(moved)
    store.remove(moved)
    store.update(other, 7, increase_only=True)
    await store.persist(other)
    assert await store.read(moved, ReadType.STORE) == 40


async def test_local_file_store_reads_one_queue_from_the_file_without_rolling_back_the_others(
    tmp_path: Path,
) -> None:
    store = LocalFileOffsetStore(tmp_path / "offsets.json")
    added, busy = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)
    store.update(added, 3, increase_only=True)
    store.update(busy, 5, increase_only=True)
    await store.persist_all([added, busy])
    store.update(busy, 9, increase_only=True)  # consumed since the last persist
    assert await store.read(added, ReadType.STORE) == 3
    assert await store.read(busy, ReadType.MEMORY) == 9


async def test_local_file_store_refuses_a_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    path.write_bytes(b'{"offsetTable": {"not json": 3}}')
    with pytest.raises(ClientError, match="damaged"):
        await LocalFileOffsetStore(path).load()


def test_atomic_write_leaves_the_old_file_when_the_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x" / "offsets.json"
    write_atomically(path, b"old")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("rocksidecar.rmq.consumer.offset_store.os.replace", broken_replace)
    with pytest.raises(OSError):
        write_atomically(path, b"new")
    assert path.read_bytes() == b"old"


async def test_a_cancelled_local_file_persist_keeps_the_next_writer_out_until_its_write_is_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Cancelling a persist does not stop its write, already in a thread: the persist holds the lock until
    that write is over, so the next one (close()'s, after cancelling the timer) never writes the same temp
    file beside it."""
    mu = threading.Lock()
    writes: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def write(path: Path, data: bytes) -> None:
        with mu:
            n = len([w for w in writes if w.startswith("start")]) + 1
            writes.append(f"start {n}")
        if n == 1:
            first_in.set()
            release.wait(timeout=10.0)
        write_atomically(path, data)
        with mu:
            writes.append(f"end {n}")

    monkeypatch.setattr(offset_store_module, "write_atomically", write)
    store = LocalFileOffsetStore(tmp_path / "offsets.json")
    mq = MessageQueue("T", "broker-a", 0)
    store.update(mq, 3, increase_only=True)
    first = asyncio.create_task(store.persist_all([mq]))
    assert await asyncio.to_thread(first_in.wait, 10.0)
    first.cancel()
    await asyncio.sleep(0)  # one step: the cancellation reaches the persist
    assert not first.done() and store._lock.locked()  # still waiting for its thread, holding the lock
    store.update(mq, 4, increase_only=True)
    second = asyncio.create_task(store.persist_all([mq]))
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert writes == ["start 1", "end 1", "start 2", "end 2"]
    reloaded = LocalFileOffsetStore(tmp_path / "offsets.json")
    await reloaded.load()
    assert await reloaded.read(mq, ReadType.MEMORY) == 4
