"""Review of the read source's internals (pipeline.source, pipeline.broker_read): each test here fails on
the code as it was reviewed and names the defect it shows. No Spark session: the reader and planner
functions are called directly, with a scripted stand-in for BrokerApi / the name server, or for
broker_read.Cluster as a whole."""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rocksidecar.pipeline import broker_read, source
from rocksidecar.pipeline.broker_read import Bounds, Cluster, DataLossError, DownBrokers, Page
from rocksidecar.pipeline.queue_ranges import QueueRef, from_offsets
from rocksidecar.pipeline.read_options import ReadOptions, parse
from rocksidecar.rmq import MessageQueue, PullResult, PullStatus
from rocksidecar.rmq.errors import ConnectError
from rocksidecar.rmq.route import BrokerData

A0, B0 = QueueRef("T", "broker-a", 0), QueueRef("T", "broker-b", 0)
ADDR = "127.0.0.1:10911"
HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"


def records(first: int, end: int) -> Page:
    return [(o, b"m%d" % o, "", 1_000, 2_000, 0, HOST, o * 100) for o in range(first, end)]


class ScriptedApi:
    """Stands for BrokerApi's pull: ``answer(offset, call_number)`` gives the PullResult (or raises)."""

    def __init__(self, answer: Callable[[int, int], PullResult]) -> None:
        self.answer = answer
        self.pulls: list[int] = []

    async def pull(self, addr: str, group: str, mq: MessageQueue, offset: int, **_: Any) -> PullResult:
        self.pulls.append(offset)
        return self.answer(offset, len(self.pulls))


def read_all(opts: ReadOptions, api: Any, start: int, end: int, namesrv: Any = None) -> list[int]:
    """Offsets Cluster.read delivers for [start, end) of A0 with the scripted api."""

    async def go() -> list[int]:
        cluster = Cluster(opts)
        cluster._api = api
        if namesrv is None:
            cluster._addrs["broker-a"] = ADDR
        else:
            cluster._namesrv = namesrv
        try:
            return [r[0] async for page in cluster.read(A0, start, end) for r in page]
        finally:
            await cluster.close()

    return asyncio.run(go())


# --- NO_NEW_MSG inside the queue's range --------------------------------------------------------------


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_no_new_msg_before_the_queue_s_max_offset_does_not_end_the_range_silently(
    fail_on_data_loss: bool,
) -> None:
    """A real broker answers PULL_NOT_FOUND (NO_NEW_MSG) not only at the queue's end: its
    OFFSET_FOUND_NULL (the consume queue has no unit at that offset) is answered so too, with maxOffset
    past the offset asked and nextBeginOffset rolled forward. The queue holds 0 to 10 and offsets 5 to
    9 are there to read; the read of [0, 10) returned at the first pull with nothing, no error and no
    warning: a batch query (failOnDataLoss=true) got a silently short DataFrame."""

    def answer(offset: int, _: int) -> PullResult:
        if offset < 5:  # the consume queue's unit for 0..4 is missing: rolled on to 5
            return PullResult(PullStatus.NO_NEW_MSG, next_begin_offset=5, min_offset=0, max_offset=10)
        return PullResult(PullStatus.FOUND, 10, 0, 10, records=records(offset, 10))

    opts = ReadOptions("127.0.0.1:9876", ("T",), fail_on_data_loss=fail_on_data_loss)
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=r"queue T@broker-a:0"):
            read_all(opts, ScriptedApi(answer), 0, 10)
    else:
        assert read_all(opts, ScriptedApi(answer), 0, 10) == [5, 6, 7, 8, 9]


def test_offsets_passed_over_by_a_retry_answer_without_a_filter_are_reported_as_lost() -> None:
    """PULL_RETRY_IMMEDIATELY (NO_MATCHED_MSG) is what a RocketMQ broker answers for
    MESSAGE_WAS_REMOVING too: retention is deleting the commit log under the consume queue, and
    nextBeginOffset passes over the units whose messages are gone while minOffset has not caught up.
    Without a filter no offset can be passed over for not matching; the read took the answer as a
    filtered run and went on at 5: offsets 0 to 4 were skipped with failOnDataLoss=true, no error, no
    warning."""

    def answer(offset: int, _: int) -> PullResult:
        if offset < 5:
            return PullResult(PullStatus.NO_MATCHED_MSG, next_begin_offset=5, min_offset=0, max_offset=10)
        return PullResult(PullStatus.FOUND, 10, 0, 10, records=records(offset, 10))

    opts = ReadOptions("127.0.0.1:9876", ("T",))  # no tags, no sql; failOnDataLoss=true
    with pytest.raises(DataLossError, match=r"queue T@broker-a:0: offsets 0 to 4"):
        read_all(opts, ScriptedApi(answer), 0, 10)


# --- PULL_OFFSET_MOVED for an offset the queue still holds ----------------------------------------------


def test_offset_moved_for_an_offset_inside_the_queue_is_not_reported_as_deleted_offsets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PULL_OFFSET_MOVED (OFFSET_ILLEGAL) with the offset asked inside [minOffset, maxOffset): e.g. a
    RocketMQ 5 broker answers so once after an offset reset of the pulling group (every reader pulls as
    group rocksidecar_spark by default). _lost then takes the rest of the range for deleted: with
    failOnDataLoss=false it warned 'offsets 0 to 9 are gone (the queue now holds 0 to 10 ...)' and read
    nothing of the 10 messages the queue holds (with it true, the task failed the same way on every
    retry that got this answer)."""

    def answer(offset: int, call: int) -> PullResult:
        if call == 1:
            return PullResult(PullStatus.OFFSET_ILLEGAL, next_begin_offset=0, min_offset=0, max_offset=10)
        return PullResult(PullStatus.FOUND, 10, 0, 10, records=records(offset, 10))

    opts = ReadOptions("127.0.0.1:9876", ("T",), fail_on_data_loss=False)
    with caplog.at_level(logging.WARNING, logger=broker_read.__name__):
        got = read_all(opts, ScriptedApi(answer), 0, 10)
    assert got == list(range(10))
    assert "are gone" not in caplog.text


# --- a route without the master for a moment -------------------------------------------------------------


class Route:
    def __init__(self, master: str | None) -> None:
        self.master = master

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, "broker-a", 0)]

    def master_addr(self, broker_name: str) -> str | None:
        return self.master

    @property
    def broker_datas(self) -> tuple[BrokerData, ...]:  # no slave: only the master, if any
        return (BrokerData("c", "broker-a", {0: self.master} if self.master else {}),)


class ScriptedNamesrv:
    def __init__(self, masters: list[str | None]) -> None:
        self.masters = masters
        self.lookups = 0

    async def get_route(self, topic: str) -> Route:
        master = self.masters[min(self.lookups, len(self.masters) - 1)]
        self.lookups += 1
        return Route(master)


def test_a_pull_waits_out_a_master_failover_within_broker_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cluster.read waits up to brokerTimeoutMs for a broker that does not answer, looking the route up
    again after each failure ('it may have moved'). During a master failover the route lists the broker
    without a master for a moment: _address raised BrokerDownError at once (outside the retried errors),
    so the task failed on the first look-up, 10 s of brokerTimeoutMs notwithstanding, instead of reading
    from the new master a look-up later."""

    async def no_wait(_: float) -> None:
        await asyncio.sleep(0)

    monkeypatch.setattr(
        broker_read,
        "asyncio",
        types.SimpleNamespace(
            get_running_loop=asyncio.get_running_loop, gather=asyncio.gather, sleep=no_wait
        ),
    )

    def answer(offset: int, call: int) -> PullResult:
        if call == 1:
            raise ConnectError("connection refused", addr=ADDR)  # the old master went away
        return PullResult(PullStatus.FOUND, 4, 0, 4, records=records(offset, 4))

    # the first look-up finds the old master, the second none (failover under way), the third the new one
    namesrv = ScriptedNamesrv([ADDR, None, "127.0.0.1:10912"])
    opts = ReadOptions("127.0.0.1:9876", ("T",), broker_timeout_s=10.0)
    assert read_all(opts, ScriptedApi(answer), 0, 4, namesrv=namesrv) == [0, 1, 2, 3]


# --- a stream started while a broker is down ------------------------------------------------------------


class StreamCluster:
    """Stands for broker_read.Cluster in source.StreamReader: queue bounds per call of bounds(); a
    broker missing from a call's answer is named in ``down`` as the real one does."""

    def __init__(self, answers: list[dict[QueueRef, Bounds]]) -> None:
        self.answers = answers
        self.calls = 0
        self.offsets_at: dict[QueueRef, int] = {}

    def __call__(self, opts: Any) -> StreamCluster:
        return self

    async def close(self) -> None:
        return None

    async def queues(self) -> dict[QueueRef, str]:
        return {A0: ADDR, B0: "127.0.0.1:10921"}

    async def bounds(self, queues: Any, down: DownBrokers) -> dict[QueueRef, Bounds]:
        got = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        down.errors.clear()
        for ref in queues:
            if ref not in got:
                down.errors[ref.broker] = "TimeoutError: no answer"
        return dict(got)

    async def read(self, ref: QueueRef, start: int, end: int) -> AsyncGenerator[Page, None]:
        yield records(start, end)


@pytest.mark.parametrize(
    ("starting", "b0_from"),
    [("latest", 50), ('{"T": {"broker-a:0": 3, "broker-b:0": 30}}', 30)],
)
def test_a_queue_whose_broker_is_down_when_a_stream_starts_starts_where_startingoffsets_says(
    monkeypatch: pytest.MonkeyPatch, starting: str, b0_from: int
) -> None:
    """initialOffset resolves startingOffsets only for the queues whose broker answered; broker-b was
    down, so broker-b:0 is not in the initial offsets. When broker-b is back, latestOffset takes the
    queue for a new one and enters it at its EARLIEST offset: a stream started at 'latest' re-read the
    queue's whole history (offsets 0 to 49), and one given '"broker-b:0": 30' read 0 to 29, which the
    user had said to skip. The class docstring promises such a queue stalls until its broker is back;
    refusing to start (as BatchReader does) would do too."""
    cluster = StreamCluster(
        [
            {A0: Bounds(0, 10)},  # initialOffset: broker-b does not answer
            {A0: Bounds(0, 10), B0: Bounds(0, 50)},  # it is back
        ]
    )
    monkeypatch.setattr(source, "Cluster", cluster)
    reader = source.StreamReader(
        parse({"namesrv": "h:1", "topic": "T", "startingOffsets": starting}, streaming=True)
    )
    try:
        offsets = reader.initialOffset()
    except RuntimeError as exc:  # refusing to start while a broker is down is a fix as well
        assert "broker-b" in str(exc)
        return
    read_b0: list[int] = []
    for _ in range(3):  # three micro-batches
        end = reader.latestOffset(offsets, ReadAllAvailable())
        for p in reader.partitions(offsets, end):
            r = p.range  # type: ignore[attr-defined]
            if r.queue == B0:
                read_b0.extend(range(r.start, r.end))
        offsets = end
    assert from_offsets(offsets)[B0] == 50
    assert min(read_b0, default=b0_from) >= b0_from, f"re-read offsets {min(read_b0)}.. of broker-b:0"


# --- commit is best effort ------------------------------------------------------------------------------


class NamesrvDownCluster:
    def __call__(self, opts: Any) -> NamesrvDownCluster:
        return self

    async def close(self) -> None:
        return None

    async def queues(self) -> dict[QueueRef, str]:
        raise ConnectError("name server 127.0.0.1:9876: connection refused")

    async def commit(self, positions: dict[QueueRef, int], group: str) -> None:
        raise AssertionError("not reached")


def test_commit_with_the_name_server_unreachable_does_not_fail_the_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """StreamReader.commit stores offsets under commitGroup only so that mqadmin shows the lag, 'best
    effort: a broker that fails is logged, the next commit repeats it'. The route look-up before it
    was outside that: a name server that did not answer at commit time raised out of commit(), and
    Spark fails the streaming query when a source's commit raises."""
    monkeypatch.setattr(source, "Cluster", NamesrvDownCluster())
    reader = source.StreamReader(parse({"namesrv": "h:1", "topic": "T", "commitGroup": "g"}, streaming=True))
    reader.commit({"T": {"broker-a:0": 5}})  # raised ConnectError
