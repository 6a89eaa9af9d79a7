"""MessageStore: offsets, the pull decision table (protocol reference §5.4), tag filtering, pull caps,
search by time, and a restart from a directory keeping messages at the same offsets."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rocksidecar.devbroker.commitlog import CommitLog
from rocksidecar.devbroker.store import MAX_PULL_BYTES, GetStatus, MessageStore, NewMessage, tag_code
from rocksidecar.rmq.message_codec import decode_stored_all, offset_msg_id, pack_host

BORN = pack_host("10.0.0.5", 50000)


class Clock:
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms


def new(body: bytes = b"hello", tags: str | None = None, props: str = "") -> NewMessage:
    text = "\x02".join(p for p in (props, f"TAGS\x01{tags}" if tags else "") if p)
    return NewMessage(body, 0, 0, 1_699_999_999_000, BORN, text, tag_code(tags))


def make_store(
    directory: Path | None = None,
    clock: Clock | None = None,
    segment_bytes: int = 64 * 1024 * 1024,
    max_bytes: int | None = None,
) -> MessageStore:
    log = CommitLog(directory, segment_bytes=segment_bytes, max_bytes=max_bytes)
    store = MessageStore(log, now_ms=clock or Clock())
    store.store_host = pack_host("127.0.0.1", 10911)
    return store


def test_offsets_count_per_queue_and_commit_log_offsets_advance_by_record_size() -> None:
    store = make_store()
    a = store.put("T", 0, [new(b"one"), new(b"two")])
    b = store.put("T", 1, [new(b"three")])
    c = store.put("T", 0, [new(b"four")])
    assert [x.queue_offset for x in a + b + c] == [0, 1, 0, 2]
    records = [store.record_at(x.commit_log_offset) for x in a + b + c]
    assert all(r is not None for r in records)
    sizes = [len(r) for r in records if r is not None]
    assert [x.commit_log_offset for x in a + b + c] == [0, sizes[0], sum(sizes[:2]), sum(sizes[:3])]
    assert a[1].msg_id == offset_msg_id(store.store_host, a[1].commit_log_offset)
    assert (store.min_offset("T", 0), store.max_offset("T", 0), store.max_offset("T", 9)) == (0, 3, 0)


def test_stored_record_carries_what_the_broker_records() -> None:
    clock = Clock()
    store = make_store(clock=clock)
    store.put("T", 2, [new(b"body", tags="TagA", props="KEYS\x01k1")])
    (msg,) = store.messages("T", 2)
    assert (msg.topic, msg.body, msg.queue_id, msg.queue_offset) == ("T", b"body", 2, 0)
    assert (msg.born_host, msg.store_host) == ("10.0.0.5:50000", "127.0.0.1:10911")
    assert (msg.born_timestamp_ms, msg.store_timestamp_ms) == (1_699_999_999_000, clock.ms)
    assert msg.tags == "TagA" and msg.keys == ("k1",)


def test_decision_table_outside_the_queue_range() -> None:
    store = make_store()
    missing = store.get("T", 0, 5, 32, None)
    assert (missing.status, missing.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    store.put("T", 0, [new(), new()])
    one = store.get("T", 0, 2, 32, None)
    assert (one.status, one.next_begin_offset, one.min_offset, one.max_offset) == (
        GetStatus.OFFSET_OVERFLOW_ONE,
        2,
        0,
        2,
    )
    badly = store.get("T", 0, 7, 32, None)
    assert (badly.status, badly.next_begin_offset, badly.body) == (GetStatus.OFFSET_OVERFLOW_BADLY, 2, b"")


def test_found_reads_from_the_offset_and_caps_at_32_messages() -> None:
    store = make_store()
    store.put("T", 0, [new(str(i).encode()) for i in range(40)])
    first = store.get("T", 0, 3, 100, None)
    assert first.status is GetStatus.FOUND and first.next_begin_offset == 35
    bodies = [m.body for m in decode_stored_all(first.body)]
    assert bodies == [str(i).encode() for i in range(3, 35)]
    assert len(decode_stored_all(store.get("T", 0, 0, 5, None).body)) == 5


def test_pull_bytes_are_capped_but_one_message_always_fits() -> None:
    store = make_store()
    big = b"x" * (MAX_PULL_BYTES // 2)
    store.put("T", 0, [new(big), new(big), new(big)])
    result = store.get("T", 0, 0, 32, None)
    assert len(decode_stored_all(result.body)) == 1 and result.next_begin_offset == 1


def test_tag_filter_skips_other_tags_and_reports_no_match() -> None:
    store = make_store()
    store.put("T", 0, [new(tags="TagB"), new(tags="TagA"), new(), new(tags="TagB")])
    only_a = store.get("T", 0, 0, 32, frozenset({tag_code("TagA")}))
    assert [m.tags for m in decode_stored_all(only_a.body)] == ["TagA"]
    assert only_a.next_begin_offset == 4  # past every entry it examined
    none = store.get("T", 0, 2, 32, frozenset({tag_code("TagC")}))
    assert (none.status, none.next_begin_offset, none.body) == (GetStatus.NO_MATCHED_MESSAGE, 4, b"")


def test_search_offset_by_store_time() -> None:
    clock = Clock(1000)
    store = make_store(clock=clock)
    for ms in (1000, 1000, 1010, 1030):
        clock.ms = ms
        store.put("T", 0, [new()])
    # An exact match is the first equal entry the binary search hits (mid of 0..3 is 1), not the earliest.
    assert store.search_offset("T", 0, 1000) == 1
    assert store.search_offset("T", 0, 1020) == 2  # a tie goes to the earlier message
    assert store.search_offset("T", 0, 1026) == 3
    assert (store.search_offset("T", 0, 5), store.search_offset("T", 0, 9999)) == (0, 3)
    assert store.search_offset("T", 7, 1000) == 0


def test_search_offset_for_a_time_a_batch_shares_answers_the_middle_message() -> None:
    """4.9.4 answers 2 for a batch of five at offsets 0..4 (tests/realbroker/test_devbroker_parity.py)."""
    clock = Clock(1000)
    store = make_store(clock=clock)
    store.put("T", 0, [new() for _ in range(5)])
    assert store.search_offset("T", 0, 1000) == 2
    clock.ms = 2000
    store.put("T", 0, [new() for _ in range(3)])  # 0..4 at 1000, 5..7 at 2000
    assert (store.search_offset("T", 0, 1000), store.search_offset("T", 0, 2000)) == (3, 5)


def _java_get_offset_in_queue_by_time(times: list[int], timestamp: int) -> int:
    """ConsumeQueue.getOffsetInQueueByTime transliterated, byte positions and all (one file from 0)."""
    unit = 20  # CQ_STORE_UNIT_SIZE
    low, high = 0, len(times) * unit - unit
    target = left = right = -1
    left_value = right_value = -1
    while high >= low:
        mid = (low + high) // (2 * unit) * unit
        stored = times[mid // unit]
        if stored == timestamp:
            target = mid
            break
        if stored > timestamp:
            high, right, right_value = mid - unit, mid, stored
        else:
            low, left, left_value = mid + unit, mid, stored
    if target != -1:
        offset = target
    elif left_value == -1:
        offset = right
    elif right_value == -1:
        offset = left
    else:
        offset = right if abs(timestamp - left_value) > abs(timestamp - right_value) else left
    return offset // unit


def test_search_offset_agrees_with_the_java_search_on_random_queues() -> None:
    rng = random.Random(7)
    for _ in range(300):
        clock = Clock(1000)
        store = make_store(clock=clock)
        times = []
        for _ in range(rng.randint(1, 40)):
            clock.ms += rng.choice((0, 0, 1, 5, 10))
            times.append(clock.ms)
            store.put("T", 0, [new()])
        for ts in range(times[0] - 3, times[-1] + 4):
            assert store.search_offset("T", 0, ts) == _java_get_offset_in_queue_by_time(times, ts), (
                times,
                ts,
            )


def test_store_times_never_go_backwards() -> None:
    clock = Clock(2000)
    store = make_store(clock=clock)
    store.put("T", 0, [new()])
    clock.ms = 1000
    store.put("T", 0, [new()])
    assert [m.store_timestamp_ms for m in store.messages("T", 0)] == [2000, 2000]


def test_record_at_refuses_offsets_inside_a_record() -> None:
    store = make_store()
    (a,) = store.put("T", 0, [new()])
    assert store.record_at(a.commit_log_offset) is not None
    assert store.record_at(a.commit_log_offset + 4) is None
    assert store.record_at(10**9) is None


def test_restart_from_directory_keeps_messages_and_offsets(tmp_path: Path) -> None:
    first = CommitLog(tmp_path)
    store = MessageStore(first, now_ms=Clock())
    store.put("T", 0, [new(b"a"), new(b"b", tags="X")])
    store.put("U", 3, [new(b"c")])
    first.close()

    log = CommitLog(tmp_path)
    again = MessageStore(log, now_ms=Clock())
    assert [m.body for m in again.messages("T", 0)] == [b"a", b"b"]
    assert again.max_offset("U", 3) == 1
    assert [m.body for m in decode_stored_all(again.get("T", 0, 0, 32, frozenset({tag_code("X")})).body)] == [
        b"b"
    ]
    end = sum(m.store_size for m in again.messages("T", 0) + again.messages("U", 3))
    (nxt,) = again.put("T", 0, [new(b"d")])
    assert (nxt.queue_offset, nxt.commit_log_offset) == (2, end)
    log.close()


def test_torn_tail_is_cut_on_restart(tmp_path: Path) -> None:
    log = CommitLog(tmp_path)
    store = MessageStore(log, now_ms=Clock())
    store.put("T", 0, [new(b"kept")])
    log.close()
    (segment,) = tmp_path.iterdir()
    with segment.open("ab") as f:
        f.write(b"\x00\x00\x01\x00half a record")
    log = CommitLog(tmp_path)
    again = MessageStore(log, now_ms=Clock())
    assert [m.body for m in again.messages("T", 0)] == [b"kept"]
    assert segment.stat().st_size == log.end
    log.close()


def test_retention_drops_old_segments_and_raises_the_min_offset() -> None:
    store = make_store(segment_bytes=4096, max_bytes=8192)
    body = b"x" * 900
    for _ in range(30):
        store.put("T", 0, [new(body)])
    low = store.min_offset("T", 0)
    assert 0 < low < 30 and store.max_offset("T", 0) == 30
    moved = store.get("T", 0, 0, 32, None)
    assert (moved.status, moved.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, low)
    assert store.messages("T", 0)[0].queue_offset == low


@pytest.mark.parametrize("bad", [0, -1])
def test_commit_log_rejects_tiny_segments(bad: int) -> None:
    with pytest.raises(ValueError, match="segment_bytes"):
        CommitLog(None, segment_bytes=bad)
