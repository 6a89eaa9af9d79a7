"""Placement, marks parsing and the scheduler's gate, without brokers."""

from __future__ import annotations

import pytest

from rocksidecar.app.dmq import inner, marks
from rocksidecar.app.dmq.replicas import ReplicaSet

NAMES = ("dmq-0", "dmq-1", "dmq-2")


def test_every_replica_ranks_alike_and_copies_holders_hold() -> None:
    sets = [ReplicaSet(NAMES, me, 2) for me in NAMES]
    for i in range(300):
        id_ = f"id{i}"
        (holders,) = {tuple(s.holders(id_)) for s in sets}  # the same answer on every replica
        assert len(holders) == 2
        assert [s.me for s in sets if s.holds(id_)] == sorted(holders)
    firsts = [ReplicaSet(NAMES, NAMES[0], 2).holders(f"id{i}")[0] for i in range(300)]
    assert all(firsts.count(n) > 50 for n in NAMES)  # the load is shared


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


def test_a_mark_round_trips() -> None:
    m = marks.parse(marks.encode("inc", ["a", "b"]), {inner.OP: marks.OP_MARK})
    assert m == marks.Mark("inc", ("a", "b"))


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
    ],
)
def test_hostile_marks_are_refused_whole(body: bytes, props: dict[str, str]) -> None:
    with pytest.raises(marks.MarkFormatError):
        marks.parse(body, props)
