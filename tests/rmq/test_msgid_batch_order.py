"""The ids of one next_ids call (a batch's) ascend (session 31 review).

They share one time stamp and end in a 16-bit counter; the retry store (due:count:type:id) and the delay
store (due:id) order same-millisecond records by id, so a batch whose counter wrapped inside it had its
tail replayed or published ahead of its head. tests/app/test_spooled_order.py shows it end to end.
"""

from __future__ import annotations

import datetime as dt
import itertools

from rocksidecar.rmq.msgid import UniqIdGenerator


def _generator(counter: int) -> tuple[UniqIdGenerator, list[int]]:
    now = [int(dt.datetime(2026, 11, 1).astimezone().timestamp() * 1000) + 1234]
    gen = UniqIdGenerator(ip=bytes([10, 0, 0, 5]), pid=0xC35B, magic=0x18B4AAC2, now_ms=lambda: now[0])
    gen._counter = itertools.count(counter)
    return gen, now


def test_the_ids_of_one_batch_ascend_across_the_counter_wrap() -> None:
    gen, _ = _generator(0xFFFE)
    ids = gen.next_ids(4)
    assert ids == sorted(ids) and len(set(ids)) == 4, ids
    assert len({i[:28] for i in ids}) == 1 and all(len(i) == 32 for i in ids)  # Java's layout: one stamp
    assert [i[28:] for i in ids] == ["0000", "0001", "0002", "0003"]  # started at the counter's 0
    # The next ids go on after the batch: none repeats one of it (nor of the values skipped over).
    after = [gen.next_id(), *gen.next_ids(2)]
    assert [i[28:] for i in after] == ["0004", "0005", "0006"]


def test_a_batch_that_fits_before_the_wrap_takes_the_next_values() -> None:
    gen, _ = _generator(0xFFFB)
    assert [i[28:] for i in gen.next_ids(4)] == ["FFFB", "FFFC", "FFFD", "FFFE"]
    assert gen.next_id()[28:] == "FFFF"  # single ids keep their plain 16-bit counter, wrap included
    assert gen.next_id()[28:] == "0000"
    assert gen.next_ids(0) == []


def test_one_milliseconds_ids_stay_unique_when_batches_skip_to_the_wrap() -> None:
    """A millisecond's ids repeat only when its counter values span 65 536; a skip (at most a batch's
    size less one, once a wrap) leaves that out of reach of any real rate: here 60 000 ids of one stamp."""
    gen, _ = _generator(0xFF00)
    ids = [i for _ in range(60) for i in gen.next_ids(1000)]
    assert len(set(ids)) == len(ids)
