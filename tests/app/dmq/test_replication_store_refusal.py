"""A replica whose delay store refuses writes leaves its share to the other holders (app.dmq.replication
``_beat``, ``_store_refuses``), and comes back only after a refused write succeeded, caught up with the
marks first. No brokers: the beats go through a stand-in sender, heard by both replicas."""

from __future__ import annotations

import asyncio
import dataclasses
import types
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocksidecar.app.config import Settings
from rocksidecar.app.dmq import beats, inner, replication
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.replication import Replication
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.app.wiring import COLUMN_FAMILIES
from rocksidecar.rmq.consumer import ConsumeStatus
from rocksidecar.rmq.message import MessageExt, MessageQueue
from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.memory import MemoryKV
from tests.app.dmq.test_dmq_replica_units import HeldCatchUp
from tests.delay.conftest import START_MS, message
from tests.fakes import FaultyKV
from tests.rmq.consumer.factory import stored

NAMES = ("dmq-0", "dmq-1", "dmq-2")
ME = NAMES[0]
INNER = MessageQueue("dmq_inner_topic", "broker-a", 0)


@dataclass
class Pair:
    """Replica ``a`` (on a store that can refuse writes) and ``b``, the other holder of ``id_``; one clock
    for both; ``a``'s beats are heard by both, ``b`` hears its own with ``b_beats()``."""

    a: DmqService
    b: DmqService
    a_rep: Replication
    b_rep: Replication
    faulty: FaultyKV
    id_: str
    now: list[int]
    a_sent: list[int]

    def b_beats(self) -> None:
        self.b_rep.beats.heard(beats.Beat(self.b_rep.replicas.me, self.now[0]))

    def inner_message(self, id_: str | None = None) -> MessageExt:
        props = {
            "UNIQ_KEY": id_ or self.id_,
            inner.REAL_TOPIC: "orders",
            inner.DELIVER_MS: str(wall_ms() + 60_000),
        }
        return dataclasses.replace(stored(0, b"body", topic=INNER.topic), properties=props)

    async def presence_interval(self) -> None:
        """One presence interval: ``a`` beats (or not), ``b`` beats."""
        self.now[0] += 500
        await self.a_rep._beat()
        self.b_beats()


def _service(tmp_path: Path, me: str, kv: object) -> DmqService:
    options = DmqOptions(replicas=",".join(NAMES), instance_name=me)
    settings = Settings(namesrv=("127.0.0.1:9",), data_dir=str(tmp_path / me))
    return DmqService(settings, options, kv=kv)  # type: ignore[arg-type]


@pytest.fixture
async def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Pair]:
    monkeypatch.setattr(replication, "Convergence", HeldCatchUp)
    HeldCatchUp.started, HeldCatchUp.release = 0, asyncio.Event()
    faulty = FaultyKV(MemoryKV(COLUMN_FAMILIES))
    a = _service(tmp_path, ME, faulty)
    a_rep = a.replication
    assert a_rep is not None
    id_ = next(i for i in (f"id{n}" for n in range(1000)) if a_rep.replicas.holders(i)[0] == ME)
    other = a_rep.replicas.holders(id_)[1]
    b = _service(tmp_path, other, MemoryKV(COLUMN_FAMILIES))
    b_rep = b.replication
    assert b_rep is not None
    now = [START_MS]
    for rep in (a_rep, b_rep):
        rep.beats._clock_ms = lambda: now[0]
        rep._quiet_from_ms = now[0]
        rep.presence.joined = True  # both converged and joined
    a_rep.presence._others = frozenset({other})
    b_rep.presence._others = frozenset({ME})  # the brokers list both: a's connections are fine
    a_sent: list[int] = []

    def a_beats() -> bool:  # a's beat, on the presence topic, heard by both
        a_sent.append(now[0])
        for rep in (a_rep, b_rep):
            rep.beats.heard(beats.Beat(ME, now[0]))
        return True

    a_rep._beat_sender = types.SimpleNamespace(beat=a_beats, close=_nothing)  # type: ignore[assignment]
    p = Pair(a, b, a_rep, b_rep, faulty, id_, now, a_sent)
    try:
        yield p
    finally:
        faulty.write_fault = None
        for task in (a_rep._catching_up, b_rep._catching_up):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for s in (a, b):
            await s.delay.close()
            await s.writer.close()


async def _nothing() -> None:
    return None


async def test_a_replica_whose_store_refuses_its_inner_messages_leaves_its_share_to_the_other_holder(
    pair: Pair,
) -> None:
    """Replicas exist so that a message is published on time while one holder cannot (README "Rock-DMQ
    replicas": "its share is published by the others"). A replica whose delay store refuses writes (a full
    disk, which "can last hours", an I/O error) cannot store the inner messages it is first holder of:
    its consumer retries the batch forever. It used to keep beating and stay in the publishers' group,
    so the other holder, which stored its copy, counted it live and turned its copy away as "not my
    turn": published by none until that disk was fixed. (Review, session 29.)"""
    p = pair
    ext = p.inner_message()
    assert await p.b_rep.listener(p.b.listener)([ext], INNER) is ConsumeStatus.SUCCESS
    assert p.b.delay.get(p.id_) is not None  # the second holder has its copy
    p.faulty.write_fault = "No space left on device"
    with pytest.raises(StorageError):  # a's consumer gets this batch again and again
        await p.a_rep.listener(p.a.listener)([ext], INNER)
    for _ in range(20):  # 10 s, a presence interval at a time; a's intake still failing
        await p.presence_interval()
    assert p.a.delay.get(p.id_) is None and not p.a.delay.healthy  # a holds nothing, and knows it
    assert p.a_sent == []  # no beat since its store refused the batch
    assert not p.a_rep.may_publish(p.id_)  # a publishes nothing meanwhile either
    assert p.b_rep.may_publish(p.id_), (
        f"{p.b_rep.replicas.me} holds {p.id_} but leaves it to {ME} (live: {sorted(p.b_rep.presence.live)}), "
        "whose store refused it 10 s ago and still does: published by none"
    )
    assert HeldCatchUp.started == 0  # no catch-up while the store still refuses


async def test_it_comes_back_only_after_the_refused_batch_was_stored_and_the_marks_were_read(
    pair: Pair,
) -> None:
    """A store that takes a write again (here, another message) while the refused batch still fails
    keeps the replica out: it rejoins only once the batch it could not store is stored, and then, as
    after a silence, sends no beat and publishes nothing until it has read the marks the others sent
    in its place meanwhile."""
    p = pair
    ext = p.inner_message()
    await p.presence_interval()
    assert p.a_sent == [p.now[0]]  # beating, live
    p.faulty.write_fault = "No space left on device"
    with pytest.raises(StorageError):
        await p.a_rep.listener(p.a.listener)([ext], INNER)
    p.faulty.write_fault = None
    await p.a.delay.schedule(message("other", START_MS + 60_000))  # a write succeeds: healthy again ...
    assert p.a.delay.healthy
    p.faulty.write_fault = "No space left on device"  # ... and the store fails again (it flaps)
    for _ in range(6):
        await p.presence_interval()
    assert len(p.a_sent) == 1 and HeldCatchUp.started == 0  # still out: its refused batch is not stored
    assert p.b_rep.may_publish(p.id_)

    p.faulty.write_fault = None
    assert await p.a_rep.listener(p.a.listener)([ext], INNER) is ConsumeStatus.SUCCESS  # consumed again
    await p.presence_interval()
    await asyncio.sleep(0)  # the catch-up task notes where the marks end
    assert HeldCatchUp.started == 1 and len(p.a_sent) == 1  # catching up first: no beat yet
    assert not p.a_rep.may_publish(p.id_) and p.b_rep.may_publish(p.id_)
    HeldCatchUp.release.set()
    assert p.a_rep._catching_up is not None
    await p.a_rep._catching_up
    await p.presence_interval()
    assert len(p.a_sent) == 2  # caught up: beats again ...
    assert p.a_rep.may_publish(p.id_) and not p.b_rep.may_publish(p.id_)  # ... and has its share back
    registry = p.a.metrics.registry
    assert registry.get_sample_value("rocksidecar_dmq_silences_total", {"who": "self"}) == 1


async def test_a_refusal_no_longer_retried_stops_keeping_the_replica_out(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The consumer consumes a refused batch again every 5 s until it is stored; a refusal not renewed
    for REFUSED_STALE_S is of a batch no longer retried (its queue went away), and keeps nobody out."""
    p = pair
    clock = [1000.0]
    monkeypatch.setattr("rocksidecar.app.dmq.replication.time.monotonic", lambda: clock[0])
    p.faulty.write_fault = "No space left on device"
    with pytest.raises(StorageError):
        await p.a_rep.listener(p.a.listener)([p.inner_message()], INNER)
    p.faulty.write_fault = None
    assert p.a_rep._store_refuses()
    clock[0] += replication.REFUSED_STALE_S + 1
    assert not p.a_rep._store_refuses()


async def test_published_messages_whose_sent_record_the_store_refuses_keep_it_out_too(pair: Pair) -> None:
    """The scheduler publishes nothing more while a "sent" record waits for the store: the replica's
    share would wait with it."""
    p = pair
    p.a_rep.attach(p.a.scheduler)
    assert not p.a_rep._store_refuses()
    p.a.scheduler._unrecorded.append(([b"k"], START_MS, [None], ["t"]))
    assert p.a_rep._store_refuses() and not p.a_rep.may_publish(p.id_)
