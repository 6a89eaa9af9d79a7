"""Gated: turned-away due keys kept by key, re-asked at their time or all at once, bounded by a cap."""

from __future__ import annotations

import pytest

from rocksidecar.delay.gated import Gated


def test_a_key_becomes_ready_at_its_time_and_is_taken_once() -> None:
    g = Gated(10)
    g.hold([b"b", b"a"], 100)
    g.hold([b"c"], 200)
    assert g.expire(99) is None and not g.has_ready and g.next_ms() == 100
    g.expire(100)
    assert g.has_ready and g.next_ms() == 200
    assert b"a" in g and len(g) == 3  # ready keys are still kept until taken (scans skip them)
    assert g.take_ready(1) == [b"a"] and g.take_ready(10) == [b"b"]  # the same time: key order
    assert g.take_ready(10) == [] and b"b" not in g and len(g) == 1


def test_release_all_makes_every_kept_key_ready_lowest_first() -> None:
    g = Gated(10)
    g.hold([b"c", b"a"], 100)
    g.hold([b"b"], 50)
    g.expire(50)
    assert g.release_all() is None
    assert g.take_ready(10) == [b"b", b"a", b"c"]  # the one ready before, then the rest in key order
    assert g.next_ms() is None and g.lowest() is None


def test_lowest_follows_the_kept_keys() -> None:
    g = Gated(10)
    g.hold([b"m", b"k", b"x"], 100)
    assert g.lowest() == b"k"
    g.expire(100)
    assert g.take_ready(1) == [b"k"] and g.lowest() == b"m"
    assert g.take_ready(1) == [b"m"] and g.lowest() == b"x"
    g.hold([b"k"], 300)  # turned away again
    assert g.lowest() == b"k" and g.next_ms() == 300


def test_past_the_cap_only_the_lowest_rest_is_remembered_for_a_rescan() -> None:
    g = Gated(2)
    g.hold([b"d", b"e", b"c", b"f"], 100)
    assert len(g) == 2 and b"c" not in g and g.overflow == b"c"
    assert g.lowest() == b"c"  # the floor stays below what was not kept
    g.hold([b"a"], 50)
    assert g.overflow == b"a" and g.next_ms() == 50
    assert g.expire(50) == b"a"  # the cursor goes back to it; forgotten here
    assert g.overflow is None and g.lowest() == b"d"
    g.hold([b"z"], 60)
    assert g.release_all() == b"z" and g.take_ready(10) == [b"d", b"e"]


def test_stale_heap_entries_stay_bounded() -> None:
    g = Gated(4)
    for round_ in range(5000):
        g.hold([b"k"], round_)
        g.expire(round_)
        assert g.take_ready(1) == [b"k"]
    assert len(g._low) <= 1024 + 2 and len(g._timers) <= 1024 + 2


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="cap"):
        Gated(0)


def test_a_forgotten_key_is_not_taken_nor_counted_nor_the_floor() -> None:
    g = Gated(2)
    g.hold([b"a", b"b"], 100)
    assert g.forget([b"a", b"zz"]) == 1  # zz was never kept
    assert b"a" not in g and len(g) == 1 and g.lowest() == b"b"
    g.hold([b"c"], 100)  # room again under the cap: kept, not an overflow
    assert g.overflow is None and len(g) == 2
    g.expire(100)
    assert g.forget([b"c"]) == 1  # ready already: its ready entry goes stale
    assert g.take_ready(10) == [b"b"] and len(g) == 0 and g.lowest() is None


def test_a_key_forgotten_while_ready_and_held_again_waits_for_its_new_time() -> None:
    g = Gated(cap=10)
    g.hold([b"k"], until_ms=100)
    g.expire(100)  # ready
    g.forget([b"k"])  # its stale ready entry stays in the queue
    g.hold([b"k"], until_ms=500)
    assert g.take_ready(10) == []
    assert b"k" in g and len(g) == 1
    g.expire(500)
    assert g.take_ready(10) == [b"k"]
