"""Placement, marks parsing, beats, presence and the scheduler's gate, without brokers."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import types
from pathlib import Path

import pytest

from rocksidecar.app.config import Settings
from rocksidecar.app.dmq import beats, envelope, inner, marks, replication
from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.presence import Presence
from rocksidecar.app.dmq.refresh import Refresher
from rocksidecar.app.dmq.replicas import ReplicaSet
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.app.wiring import COLUMN_FAMILIES
from rocksidecar.delay import DelayedMessage
from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.message import MessageExt
from rocksidecar.storage.keys import MAX_DUE_MS
from rocksidecar.storage.memory import MemoryKV
from tests.rmq.consumer.factory import stored

NAMES = ("dmq-0", "dmq-1", "dmq-2")
NOW_MS = 1_800_000_000_000
log = logging.getLogger(__name__)


def test_every_replica_ranks_alike_and_copies_holders_hold() -> None:
    sets = [ReplicaSet(NAMES, me, 2) for me in NAMES]
    for i in range(300):
        id_ = f"id{i}"
        (holders,) = {tuple(s.holders(id_)) for s in sets}  # the same answer on every replica
        assert len(holders) == 2
        assert [s.me for s in sets if s.holds(id_)] == sorted(holders)
    firsts = [ReplicaSet(NAMES, NAMES[0], 2).holders(f"id{i}")[0] for i in range(300)]
    assert all(firsts.count(n) > 50 for n in NAMES)  # the load is shared


@pytest.mark.parametrize(
    ("names", "copies", "id_", "holders"),
    [
        (NAMES, 2, "7F000001000073A1B2C3D4E5F6000001", ["dmq-2", "dmq-1"]),
        (NAMES, 2, "0A0B0C0D0E0F101112131415161718191A1B", ["dmq-2", "dmq-1"]),
        (NAMES, 2, "id1", ["dmq-0", "dmq-2"]),
        (NAMES, 2, "id2", ["dmq-1", "dmq-0"]),
        (NAMES, 2, "id3", ["dmq-2", "dmq-0"]),
        (NAMES, 2, "\u00e9t\u00e9", ["dmq-1", "dmq-2"]),
        (NAMES, 3, "id2", ["dmq-1", "dmq-0", "dmq-2"]),
        (("r0", "r1", "r2", "r3", "r4"), 3, "id0", ["r1", "r3", "r0"]),
        (("r0", "r1", "r2", "r3", "r4"), 3, "id2", ["r0", "r2", "r4"]),
    ],
)
def test_placement_is_pinned(names: tuple[str, ...], copies: int, id_: str, holders: list[str]) -> None:
    """Stores already on disk hold the ids this ranking gave them (blake2b-64 of name NUL id, highest
    first): a cheaper computation of it must rank every id the same."""
    assert list(ReplicaSet(names, names[0], copies).holders(id_)) == holders


def test_placement_is_the_reference_ranking_for_every_id() -> None:
    names = tuple(f"rocksidecar-dmq-{i}" for i in range(7))
    s = ReplicaSet(names, names[0], 3)
    for i in range(2000):
        id_ = hashlib.md5(str(i).encode()).hexdigest().upper()
        ranked = sorted(
            names,
            key=lambda n: hashlib.blake2b(f"{n}\x00{id_}".encode(), digest_size=8).digest(),
            reverse=True,
        )
        assert list(s.holders(id_)) == ranked[:3]


def test_publisher_is_the_first_live_holder() -> None:
    s = ReplicaSet(NAMES, "dmq-0", 2)
    first, second = s.holders("x")
    assert s.publisher("x", set(NAMES)) == first
    assert s.publisher("x", set(NAMES) - {first}) == second
    assert s.publisher("x", set(NAMES) - {first, second}) is None


@pytest.mark.parametrize(
    ("names", "me", "copies"),
    [((), "a", 1), (("a", "a"), "a", 1), (("a", "b"), "c", 1), (("a", "b"), "a", 3), (("a",), "a", 0)],
)
def test_bad_replica_sets_are_refused(names: tuple[str, ...], me: str, copies: int) -> None:
    with pytest.raises(ValueError, match=r"replicas|copies"):
        ReplicaSet(names, me, copies)


def test_default_copies() -> None:
    assert ReplicaSet.parse("a, b ,c", "b", None).copies == 2
    assert ReplicaSet.parse("a", "a", None).copies == 1


def test_a_mark_round_trips_with_its_due_times_and_one_without_them_still_parses() -> None:
    m = marks.parse(marks.encode("inc", ["a", "b"], [5, MAX_DUE_MS]), {inner.OP: marks.OP_MARK})
    assert m == marks.Mark("inc", ("a", "b"), (5, MAX_DUE_MS))
    # a replica of the previous version (a rolling upgrade): no due times, its ids go the scan way
    old = marks.parse(b'{"v": 1, "by": "inc", "ids": ["a", "b"]}', {inner.OP: marks.OP_MARK})
    assert old == marks.Mark("inc", ("a", "b")) and old.dues is None


def _mark(body: bytes) -> MessageExt:
    return dataclasses.replace(stored(0, body), properties={inner.OP: marks.OP_MARK})


def test_marks_name_each_held_id_once_with_its_due_and_a_hostile_mark_is_skipped_whole() -> None:
    malformed: list[None] = []
    batch = [
        _mark(marks.encode("peer", ["a", "b", "not-held", "c"], [10, 20, 30, 40])),
        _mark(marks.encode("peer", ["d", "e"], [50, -1])),  # hostile: applied in no part
        _mark(marks.encode("old", ["a", "f", "c"])),  # a previous version's: no dues
        _mark(marks.encode("me", ["g"], [70])),  # this replica's own
        _mark(marks.encode("peer", ["f", "a"], [60, 11])),
    ]
    parsed = envelope.each(batch, marks.parse, marks.MarkFormatError, lambda: malformed.append(None), log)
    got = marks.to_drop(parsed, "me", lambda id_: id_ != "not-held")
    assert got == {"a": 10, "b": 20, "c": 40, "f": 60}  # f: the due a later mark said
    assert len(malformed) == 1


@pytest.mark.parametrize(
    ("body", "props"),
    [
        (marks.encode("i", ["a"]), {}),
        (b"not json", {inner.OP: marks.OP_MARK}),
        (b'{"v": 2, "by": "i", "ids": []}', {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": 3, "ids": []}', {inner.OP: marks.OP_MARK}),
        (marks.encode("i", ["x"] * (marks.MAX_IDS + 1)), {inner.OP: marks.OP_MARK}),
        (marks.encode("i", ["a b\n"]), {inner.OP: marks.OP_MARK}),
        (marks.encode("i", ["x" * 129]), {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": [1]}', {inner.OP: marks.OP_MARK}),
        # due times: not one per id, not a list, not an int (a bool is not one), out of the keys' range
        (marks.encode("i", ["a", "b"], [1]), {inner.OP: marks.OP_MARK}),
        (marks.encode("i", ["a"], [1, 2]), {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": {"a": 1}}', {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": "1"}', {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": ["1"]}', {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": [1.0]}', {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": [true]}', {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": [null]}', {inner.OP: marks.OP_MARK}),
        (marks.encode("i", ["a"], [-1]), {inner.OP: marks.OP_MARK}),
        (marks.encode("i", ["a"], [MAX_DUE_MS + 1]), {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": [1e300]}', {inner.OP: marks.OP_MARK}),
        (b'{"v": 1, "by": "i", "ids": ["a"], "dues": [99999999999999999999999]}', {inner.OP: marks.OP_MARK}),
    ],
)
def test_hostile_marks_are_refused_whole(body: bytes, props: dict[str, str]) -> None:
    with pytest.raises(marks.MarkFormatError):
        marks.parse(body, props)


def test_beats_fresh_until_the_timeout_and_hostile_beats_are_refused() -> None:
    now = [10_000]
    b = beats.Beats(NAMES, 2000, clock_ms=lambda: now[0])
    assert not b.fresh("dmq-0")  # never heard
    assert b.heard(beats.parse(beats.encode("dmq-0", 9_500), {inner.OP: beats.OP_BEAT}))
    assert not b.heard(beats.Beat("stranger", 9_900))  # not listed: ignored
    assert b.fresh("dmq-0") and not b.fresh("stranger")
    now[0] = 11_500
    assert b.fresh("dmq-0")
    now[0] = 11_501
    assert not b.fresh("dmq-0")  # 2 001 ms of silence: a frozen replica
    b.heard(beats.Beat("dmq-0", 8_000))  # an old beat read late changes nothing
    assert not b.fresh("dmq-0")
    b.heard(beats.Beat("dmq-0", 99_999))  # a clock ahead of ours: counted as sent now
    now[0] = 13_501
    assert b.fresh("dmq-0")
    now[0] = 13_502
    assert not b.fresh("dmq-0")
    for body, props in (
        (beats.encode("dmq-0", 1), {}),  # not a beat
        (b"{", {inner.OP: beats.OP_BEAT}),
        (b'{"v": 2, "name": "dmq-0", "at": 1}', {inner.OP: beats.OP_BEAT}),
        (b'{"v": 1, "name": "", "at": 1}', {inner.OP: beats.OP_BEAT}),
        (b'{"v": 1, "name": "dmq-0", "at": 1.5}', {inner.OP: beats.OP_BEAT}),
        (b'{"v": 1, "name": "dmq-0", "at": -1}', {inner.OP: beats.OP_BEAT}),
        (b" " * (beats.MAX_BODY + 1), {inner.OP: beats.OP_BEAT}),
    ):
        with pytest.raises(beats.BeatFormatError):
            beats.parse(body, props)


def test_beats_say_when_the_first_fresh_one_goes_stale() -> None:
    now = [10_000]
    b = beats.Beats(NAMES, 2000, clock_ms=lambda: now[0])
    assert b.next_stale_ms() is None  # nothing heard
    b.heard(beats.Beat("dmq-0", 9_000))
    b.heard(beats.Beat("dmq-1", 9_500))
    assert b.next_stale_ms() == 11_001 and b.last_ms("dmq-1") == 9_500
    now[0] = 11_001
    assert not b.fresh("dmq-0") and b.next_stale_ms() == 11_501  # the stale one no longer counts
    now[0] = 11_501
    assert b.next_stale_ms() is None


def test_a_copy_is_refreshed_once_each_time_its_age_passes_a_multiple_of_refresh_after() -> None:
    r = Refresher(None, None, "inner", 1000, lambda _m: True)  # type: ignore[arg-type]
    msg = DelayedMessage("id", "real", b"", created_ms=5_000, due_ms=10**9)

    def refreshed(since: int, now: int) -> bool:
        return r.due_for_refresh(msg, since, now)

    assert not refreshed(4_000, 5_999)  # younger than 1 s
    assert refreshed(5_900, 6_000) and refreshed(4_000, 6_100)  # crossed 1 s (also when it is new)
    assert not refreshed(6_000, 6_999)  # already done at 6 000
    assert refreshed(6_999, 7_000)  # crossed 2 s
    assert refreshed(6_500, 9_000)  # crossed several since: once
    assert r.interval_s == 1000 / 8 / 1000
    with pytest.raises(ValueError):
        Refresher(None, None, "inner", 0, lambda _m: True)  # type: ignore[arg-type]


@pytest.mark.parametrize("born", [2**63 - 1, 2**62, NOW_MS + 365 * 86_400_000, 0, -(2**63)])
def test_a_copy_s_age_counts_from_the_broker_s_store_time_not_the_producer_s_born_time(born: int) -> None:
    """The born timestamp is the producer's own number: a copy born "in the future" was never refreshed
    (its age stayed negative), so after the broker's retention a replica that lost its volume had no
    copy to rebuild it from."""
    pulled = dataclasses.replace(
        stored(7, topic="dmq_inner"),
        born_timestamp_ms=born,
        store_timestamp_ms=NOW_MS,
        properties={**stored(7).properties, inner.REAL_TOPIC: "real", inner.TIMER_DELAY_SEC: "86400"},
    )
    msg = inner.parse(pulled, NOW_MS + 5, inner.Rules(90 * 86_400_000))
    assert isinstance(msg, DelayedMessage) and msg.created_ms == NOW_MS
    r = Refresher(None, None, "inner", 3_600_000, lambda _m: True)  # type: ignore[arg-type]
    assert not r.due_for_refresh(msg, NOW_MS, NOW_MS + 3_599_999)
    assert r.due_for_refresh(
        msg, NOW_MS + 3_599_999, NOW_MS + 3_600_000
    )  # an hour after the broker stored it


class FlakyProducer:
    """Refuses the first ``refuse`` sends, then keeps what it is given."""

    def __init__(self, refuse: int) -> None:
        self.refuse = refuse
        self.sent: list[Message] = []

    async def send(self, msg: Message) -> None:
        if self.refuse:
            self.refuse -= 1
            raise RocketMQError("no broker")
        self.sent.append(msg)


async def test_marks_wait_for_their_retry_after_a_refused_send_then_go_in_order() -> None:
    now = [0.0]
    producer = FlakyProducer(refuse=1)
    sender = marks.MarkSender(producer, "m", "me", retry_s=1.0, clock=lambda: now[0])  # type: ignore[arg-type]
    sender.add([f"id{i}" for i in range(marks.MAX_IDS + 1)], list(range(marks.MAX_IDS + 1)))
    with pytest.raises(RocketMQError):
        await sender._flush()  # the Periodic logs it (throttled) and runs the next round
    await sender._flush()  # before the retry time: nothing
    assert producer.sent == [] and sender.buffered == marks.MAX_IDS + 1
    now[0] = 1.0
    await sender._flush()
    got = [marks.parse(m.body, m.properties) for m in producer.sent]
    assert [len(m.ids) for m in got] == [marks.MAX_IDS, 1] and got[0].ids[0] == "id0"
    assert got[0].dues == tuple(range(marks.MAX_IDS)) and got[1].dues == (marks.MAX_IDS,)
    assert sender.buffered == 0 and sender.sent == marks.MAX_IDS + 1
    sender.add(["late"], [7])
    await sender.close()  # what is buffered goes out at close
    last = marks.parse(producer.sent[-1].body, producer.sent[-1].properties)
    assert (last.ids, last.dues) == (("late",), (7,))


async def test_ids_published_while_a_mark_is_being_sent_go_in_the_next_one() -> None:
    sender: marks.MarkSender

    class AddsDuringSend(FlakyProducer):
        async def send(self, msg: Message) -> None:
            if not self.sent:
                sender.add(["b", "c"], [2, 3])  # another publish batch's ids, while this send awaits
            await super().send(msg)

    producer = AddsDuringSend(refuse=0)
    sender = marks.MarkSender(producer, "m", "me")  # type: ignore[arg-type]
    sender.add(["a"], [1])
    await sender._flush()
    got = [marks.parse(m.body, m.properties) for m in producer.sent]
    assert [(m.ids, m.dues) for m in got] == [(("a",), (1,)), (("b", "c"), (2, 3))]
    assert sender.sent == 3 and sender.buffered == 0


async def test_marks_of_ids_that_json_escapes_are_split_to_fit_the_body_limit() -> None:
    producer = FlakyProducer(refuse=0)
    sender = marks.MarkSender(producer, "m", "me")  # type: ignore[arg-type]
    ids = [f"{i:03d}" + '"\\' * 62 for i in range(marks.MAX_IDS)]  # 127 characters, 251 bytes in JSON
    sender.add(ids, [MAX_DUE_MS] * len(ids))
    await sender._flush()
    assert all(len(m.body) <= marks.MAX_BODY for m in producer.sent) and len(producer.sent) == 2
    got = [marks.parse(m.body, m.properties) for m in producer.sent]  # every one is read, not refused
    assert [i for m in got for i in m.ids] == ids and sender.sent == len(ids)


class _OneBroker:
    """The part of a ClientInstance that Presence reads: one broker listing ``members``."""

    def __init__(self, members: list[str]) -> None:
        self.members = members
        self.api = self

    def broker_addrs(self) -> dict[str, str]:
        return {"broker-a": "127.0.0.1:1"}

    async def get_consumer_list(self, _addr: str, _group: str, timeout_s: float) -> list[str]:
        return self.members


async def test_a_beat_going_stale_changes_the_live_set_when_it_does_not_at_the_next_round() -> None:
    now = [10_000]
    b = beats.Beats(NAMES, 200, clock_ms=lambda: now[0])
    b.heard(beats.Beat("dmq-1", 10_000))
    changes: list[frozenset[str]] = []
    changed = asyncio.Event()

    def on_change(live: frozenset[str]) -> None:
        changes.append(live)
        changed.set()

    presence = Presence(
        _OneBroker(["10.0.0.2@dmq-1"]),  # type: ignore[arg-type]
        "g_publishers", "marks", "dmq-0", interval_s=3600.0, on_change=on_change, beats=b,
    )  # fmt: skip
    presence.start()
    try:
        await asyncio.wait_for(changed.wait(), 5.0)
        assert changes == [frozenset({"dmq-1"})]
        changed.clear()
        now[0] = 10_201  # dmq-1's beat is stale now; the next member-list round is an hour away
        await asyncio.wait_for(changed.wait(), 5.0)
        assert changes == [frozenset({"dmq-1"}), frozenset()]
    finally:
        await presence.close()


async def test_a_slow_send_does_not_delay_the_next_beat_and_outstanding_sends_are_bounded() -> None:
    answers: list[asyncio.Future[object]] = []

    def send() -> asyncio.Future[object]:  # a broker that has not answered yet
        answers.append(asyncio.get_running_loop().create_future())
        return answers[-1]

    sender = beats.BeatSender(send, max_in_flight=2)
    assert sender.beat() and sender.beat()  # the second leaves while the first is unanswered
    assert not sender.beat() and sender.skipped == 1  # at most 2 unanswered: this replica goes silent
    answers[0].set_exception(RocketMQError("no answer"))  # a failed send frees its place, raises nothing
    await asyncio.sleep(0)
    assert sender.beat() and len(answers) == 3
    await sender.close()
    assert all(a.cancelled() for a in answers[1:])


class HeldCatchUp:
    """Convergence's stand-in for a catch-up with the marks: done when the test says so."""

    started = 0
    release = asyncio.Event()

    def __init__(self, _offsets: object) -> None:
        pass

    async def note(self, _instance: object, _topics: object) -> None:
        type(self).started += 1

    async def wait(self) -> None:
        await type(self).release.wait()


async def test_a_replica_silent_past_the_timeout_sends_no_beats_until_it_has_caught_up_with_the_marks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica resumed after a freeze: before, it beat again at once, the others handed its share back,
    and what fell due waited for its catch-up with the marks (4.9.4, a 60 s freeze: p99 3.2 s for its
    share). Now it stays silent while it catches up (the others keep publishing its share), beats once
    caught up, and publishes once it reads its own beat back; the silence of its catch-up and of that
    first beat's way back is not taken for a new one."""
    monkeypatch.setattr(replication, "Convergence", HeldCatchUp)
    HeldCatchUp.started, HeldCatchUp.release = 0, asyncio.Event()
    options = DmqOptions(replicas=",".join(NAMES), instance_name=NAMES[0], presence_interval_s=1.0)
    settings = Settings(namesrv=("127.0.0.1:9",), data_dir=str(tmp_path))
    service = DmqService(settings, options, kv=MemoryKV(COLUMN_FAMILIES))
    rep = service.replication
    assert rep is not None
    now = [NOW_MS]
    rep.beats._clock_ms = lambda: now[0]  # the test's clock (Beats takes one; Replication builds its own)
    rep._quiet_from_ms = NOW_MS
    sent: list[int] = []
    rep._beat_sender = types.SimpleNamespace(beat=lambda: sent.append(now[0]), close=_nothing)  # type: ignore[assignment]
    rep.presence.joined = True
    mine = next(i for i in map(str, range(100)) if rep.replicas.holders(i)[0] == NAMES[0])
    timeout = rep.beats.timeout_ms

    def hear_own() -> None:
        rep.beats.heard(beats.Beat(NAMES[0], now[0]))

    await rep._beat()
    hear_own()
    assert sent == [NOW_MS] and rep.may_publish(mine)
    now[0] += timeout + 1  # frozen: nothing heard, nothing sent for longer than the timeout
    await rep._beat()
    await asyncio.sleep(0)  # the catch-up task notes where the marks end
    assert sent == [NOW_MS] and HeldCatchUp.started == 1  # silent while it catches up
    assert not rep.may_publish(mine)
    now[0] += 5 * timeout
    await rep._beat()
    assert sent == [NOW_MS] and HeldCatchUp.started == 1  # still catching up: one catch-up, no beat
    HeldCatchUp.release.set()
    assert rep._catching_up is not None
    await rep._catching_up
    await rep._beat()
    assert sent == [NOW_MS, now[0]]  # caught up: beats again
    assert not rep.may_publish(mine)  # its own beat not read back yet ...
    now[0] += timeout  # ... for as long as the timeout, which is no new silence
    await rep._beat()
    assert not rep.may_publish(mine) and HeldCatchUp.started == 1 and len(sent) == 3
    hear_own()
    assert rep.may_publish(mine)
    registry = service.metrics.registry
    assert registry.get_sample_value("rocksidecar_dmq_silences_total", {"who": "self"}) == 1


async def _nothing() -> None:
    return None


async def test_a_refreshed_copy_carries_its_due_time_as_a_wall_time_after_a_step_back() -> None:
    """The store's clock leads the wall clock after a step back (SteadyClock.lead_ms); a refreshed copy's
    due time, which another replica reads as a wall time, is the store's minus that lead (else a
    replica rebuilt from it publishes the lead late)."""

    class Store:
        def lead_ms(self) -> int:
            return 3_600_000

    class Producer:
        def __init__(self) -> None:
            self.sent: list[Message] = []

        async def send(self, msg: Message, *, sharding_key: str | None = None) -> None:
            self.sent.append(msg)

    producer = Producer()
    r = Refresher(Store(), producer, "inner", 1000, lambda _m: True)  # type: ignore[arg-type]
    due = NOW_MS + 3_600_000 + 60_000  # on the store's clock: a minute from the wall clock's now
    assert await r._send([DelayedMessage("id", "real", b"x", created_ms=NOW_MS, due_ms=due)]) == 1
    (sent,) = producer.sent
    assert sent.properties[inner.DELIVER_MS] == str(NOW_MS + 60_000)
