"""ProcessQueue: the sliding-window committed offset, cached count/size, orderly take/give back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from tests.rmq.consumer.factory import stored


def test_a_slow_message_holds_the_offset_however_many_later_ones_finish() -> None:
    pq = ProcessQueue(100)
    pq.put([stored(o) for o in range(100, 132)], next_offset=132)
    assert pq.committed_offset() == 100
    assert pq.remove(range(101, 132)) == 100  # 31 done, offset 100 still consuming
    assert pq.count == 1
    assert pq.remove([100]) == 132  # the slow one done: the window jumps to the pull position


def test_filtered_gaps_are_skipped_when_idle() -> None:
    pq = ProcessQueue(0)
    pq.put([], next_offset=40)  # the broker skipped 40 messages the tag filter did not match
    assert pq.committed_offset() == 40
    pq.put([stored(45)], next_offset=46)
    assert pq.committed_offset() == 45


def test_count_size_span_and_drop() -> None:
    pq = ProcessQueue(0)
    assert pq.put([stored(0, b"abc"), stored(1, b"de"), stored(1, b"de")], 2) == 2
    assert (pq.count, pq.size_bytes, pq.span) == (2, 5, 1)
    pq.remove([0])
    assert (pq.count, pq.size_bytes, pq.span) == (1, 2, 0)
    pq.drop()
    assert pq.put([stored(5)], 6) == 0  # a dropped queue takes nothing more
    assert pq.count == 1


def test_orderly_take_is_in_order_and_given_back_messages_come_first() -> None:
    pq = ProcessQueue(0)
    pq.put([stored(o) for o in (3, 1, 2, 0)], 4)
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [0, 1]
    assert [m.queue_offset for m in pq.take(1)] == [2]
    pq.give_back(first)  # the listener asked to retry them in a moment
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 3]
    assert pq.committed_offset() == 0  # taken messages are still in flight


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 10**12),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("pull"), st.integers(0, 8), st.integers(0, 3)),  # batch size, filtered gap
            st.tuples(st.just("done"), st.integers(0, 2**32), st.integers(0, 8)),  # which, how many
        ),
        max_size=60,
    ),
)
def test_committed_offset_is_always_the_lowest_in_flight(
    start: int, steps: list[tuple[str, int, int]]
) -> None:
    pq = ProcessQueue(start)
    in_flight: dict[int, int] = {}  # offset -> body size
    pos = start
    last_committed = start
    for kind, a, b in steps:
        if kind == "pull":
            batch = [stored(pos + b + i, b"y" * (i + 1)) for i in range(a)]
            pos += b + a
            pq.put(batch, pos)
            in_flight.update({m.queue_offset: len(m.body) for m in batch})
        else:
            offsets = sorted(in_flight)
            chosen = [offsets[(a + i * 7) % len(offsets)] for i in range(b)] if offsets else []
            pq.remove(chosen)
            for o in chosen:
                in_flight.pop(o, None)
        committed = pq.committed_offset()
        assert committed == (min(in_flight) if in_flight else pos)
        assert all(committed <= o for o in in_flight)  # never passes a message still in flight
        assert committed >= last_committed  # and never goes back
        last_committed = committed
        assert pq.count == len(in_flight)
        assert pq.size_bytes == sum(in_flight.values())
        assert pq.span == (max(in_flight) - min(in_flight) if in_flight else 0)


@given(st.lists(st.lists(st.integers(0, 50), max_size=6), max_size=12), st.lists(st.integers(0, 50)))
def test_span_is_highest_minus_lowest_whatever_order_offsets_come_in(
    batches: list[list[int]], removed: list[int]
) -> None:
    """The span reads the cache's last offset while puts ascend (every pull from a broker); a batch
    that goes back (none does, from a real broker) must not make it wrong."""
    pq = ProcessQueue(0)
    cached: set[int] = set()
    for i, batch in enumerate(batches):
        pq.put([stored(o) for o in batch], 0)
        cached.update(batch)
        if i < len(removed):
            pq.remove([removed[i]])
            cached.discard(removed[i])
        assert pq.span == (max(cached) - min(cached) if cached else 0)
