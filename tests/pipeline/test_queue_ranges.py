"""The read source's offset arithmetic and option parsing, without Spark: maxOffsetsPerTrigger shared
over the queues, an availableNow run's end, ranges cut for minPartitions, offsets JSON round trips, bad
options named (test_source_batch checks once that such an error fails a query on the driver)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.pipeline.options import OptionError
from rocksidecar.pipeline.queue_ranges import (
    QueueRange,
    QueueRef,
    cap,
    from_offsets,
    hold_at,
    split,
    to_offsets,
)
from rocksidecar.pipeline.read_options import parse

A0, A1, B0 = QueueRef("T", "broker-a", 0), QueueRef("T", "broker-a", 1), QueueRef("T", "broker-b", 0)


def test_offsets_round_trip_through_the_checkpoint_form() -> None:
    positions = {A0: 3, B0: 7, QueueRef("U", "b:x", 12): 1}
    doc = to_offsets(positions)
    assert doc == {"T": {"broker-a:0": 3, "broker-b:0": 7}, "U": {"b:x:12": 1}}
    assert from_offsets(doc) == positions


def test_cap_shares_the_limit_in_proportion_to_what_waits() -> None:
    start = {A0: 0, A1: 10, B0: 5}
    latest = {A0: 90, A1: 20, B0: 5}
    assert cap(start, latest, 1000) == latest
    assert cap(start, latest, 10) == {A0: 9, A1: 11, B0: 5}


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    st.integers(1, 3000),
)
def test_cap_never_exceeds_the_limit_nor_a_queue_end(pairs: list[tuple[int, int]], limit: int) -> None:
    refs = [QueueRef("T", "b", i) for i in range(len(pairs))]
    start = {r: s for r, (s, _) in zip(refs, pairs, strict=True)}
    latest = {r: s + n for r, (s, n) in zip(refs, pairs, strict=True)}
    got = cap(start, latest, limit)
    assert all(start[r] <= got[r] <= latest[r] for r in refs)
    assert sum(got[r] - start[r] for r in refs) == min(limit, sum(n for _, n in pairs))


@given(st.lists(st.integers(0, 500), min_size=1, max_size=6), st.integers(1, 40))
def test_split_covers_each_range_once(sizes: list[int], min_partitions: int) -> None:
    ranges = [QueueRange(QueueRef("T", "b", i), 100, 100 + n) for i, n in enumerate(sizes)]
    pieces = split(ranges, min_partitions)
    for r in ranges:
        mine = [p for p in pieces if p.queue == r.queue]
        assert [o for p in mine for o in range(p.start, p.end)] == list(range(r.start, r.end))
    if sum(sizes) >= min_partitions:
        assert len(pieces) >= min_partitions


def test_options_parse_and_name_what_is_wrong() -> None:
    opts = parse({"namesrv": "h:9876;g:9876", "topic": "A, B", "maxoffsetspertrigger": "5"}, streaming=True)
    assert (opts.topics, opts.starting, opts.max_offsets_per_trigger) == (("A", "B"), "latest", 5)
    assert parse({"namesrv": "h:1", "topic": "A"}, streaming=False).starting == "earliest"
    with pytest.raises(OptionError, match="namesrv is required"):
        parse({"topic": "A"}, streaming=True)
    with pytest.raises(OptionError, match="endingOffsets is for batch queries only"):
        parse({"namesrv": "h:1", "topic": "A", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="offset of 'A' 'b:0' must be an integer"):
        parse({"namesrv": "h:1", "topic": "A", "startingOffsets": '{"A": {"b:0": "x"}}'}, streaming=True)
    with pytest.raises(OptionError, match="brokerTimeoutMs"):
        parse({"namesrv": "h:1", "topic": "A", "brokerTimeoutMs": "-5"}, streaming=True)


def test_an_available_now_run_stops_at_its_target() -> None:
    new = QueueRef("T", "broker-b", 1)
    later = QueueRef("T", "broker-c", 0)  # appeared after the run started: not in the target
    target = {A0: 10, A1: 5, new: 4}
    begin = {A0: 2, A1: 5, B0: 7}  # B0's broker did not answer when the run started
    latest = {A0: 30, A1: 9, B0: 12, new: 0, later: 0}
    assert hold_at(begin, latest, target) == {A0: 10, A1: 5, B0: 7, new: 0}
    # the next call: the new queue was entered, it reads up to the target; then nothing moves: the end
    step = {A0: 10, A1: 5, B0: 7, new: 0}
    assert hold_at(step, {**latest, new: 6}, target) == {A0: 10, A1: 5, B0: 7, new: 4}
    end = {A0: 10, A1: 5, B0: 7, new: 4}
    assert hold_at(end, {**latest, new: 6}, target) == end


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"topic": ""}, "option topic is required"),
        ({"startingOffsets": "latest"}, "startingOffsets=latest makes no sense"),
        ({"startingOffsets": '{"Other": {"broker-a:0": 1}}'}, "names topic 'Other'"),
        ({"endingOffsets": '{"T": {"broker-a": 1}}'}, "must be 'broker:queueId'"),
        # '²'.isdigit() is True: taken here, it failed later in int() with an error naming no option
        ({"startingOffsets": '{"T": {"broker-a:\u00b2": 1}}'}, "must be 'broker:queueId'"),
        ({"tags": "a", "sql": "b > 1"}, "exclude each other"),
        ({"maxOffsetsPerTrigger": "10"}, "for streaming queries only"),
        ({"failOnDataLos": "false"}, "did you mean 'failOnDataLoss'"),
        ({"accessKey": "ak"}, "accessKey and secretKey go together"),
    ],
)
def test_bad_batch_options_name_the_option(options: dict[str, str], error: str) -> None:
    with pytest.raises(OptionError, match=error):
        parse({"namesrv": "h:1", "topic": "T", **options}, streaming=False)
