"""PartitionPublisher against the fake sidecar: batches and their keys, a re-run of the partition
(what Spark does when it retries a task) sends nothing again, FAILED items are retried alone, and
rejected rows are named."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from rocksidecar.pipeline.client import GaveUpError, SidecarClient, SidecarError
from rocksidecar.pipeline.message import MessageBuilder
from rocksidecar.pipeline.options import WriteOptions
from rocksidecar.pipeline.origin import origin_id
from rocksidecar.pipeline.publisher import PartitionPublisher, ids_key, subset_key
from tests.pipeline.fake_sidecar import FakeSidecar


def rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "body": f"row {i}"} for i in range(start, start + n)]


def publisher(
    client: SidecarClient, batch_size: int = 500, batch_bytes: int = 1 << 20, **columns: str
) -> PartitionPublisher:
    builder = MessageBuilder(WriteOptions(topic="T", columns={"bodyColumn": "body", **columns}))
    return PartitionPublisher(client, builder, "job1:p3", 3, batch_size=batch_size, batch_bytes=batch_bytes)


def test_rows_go_out_in_batches_under_per_batch_keys(client: SidecarClient, fake: FakeSidecar) -> None:
    report = publisher(client).publish(rows(1200))
    assert [(s.key, s.size) for s in fake.requests] == [
        ("job1:p3:b0", 500),
        ("job1:p3:b1", 500),
        ("job1:p3:b2", 200),
    ]
    assert fake.bodies() == [f"row {i}" for i in range(1200)]
    assert (report.partition, report.rows, report.sent, report.rejected, report.requests) == (
        3,
        1200,
        1200,
        0,
        3,
    )


def test_a_rerun_of_the_partition_sends_nothing_twice(client: SidecarClient, fake: FakeSidecar) -> None:
    first = publisher(client).publish(rows(1200))
    fake.drop_after_store = 1  # and the rerun loses one answer on the way, too
    again = publisher(client).publish(rows(1200))
    assert (first.rows, first.sent, first.deduplicated) == (1200, 1200, 0)
    assert (again.rows, again.sent, again.deduplicated) == (1200, 0, 1200)  # answered, not sent again
    assert len(fake.stored) == 1200
    assert len(fake.requests) == 7  # 3 + 3 answered from the kept answers + 1 repeat of the lost one


def test_rejected_rows_of_a_repeated_answer_stay_rejected(client: SidecarClient) -> None:
    batch = [*rows(2), {"id": "bad", "body": ""}]
    publisher(client).publish(batch)
    again = publisher(client).publish(batch)
    assert (again.rows, again.deduplicated, again.rejected, again.sent) == (3, 2, 1, 0)


def test_an_empty_partition_posts_nothing(client: SidecarClient, fake: FakeSidecar) -> None:
    report = publisher(client).publish([])
    assert report.rows == 0 and fake.requests == []


def test_failed_items_are_retried_alone_until_stored(
    client: SidecarClient, fake: FakeSidecar, sleeps: list[float]
) -> None:
    fake.fail_times = {"row 3": 2, "row 7": 1}
    report = publisher(client, batch_size=10).publish(rows(10))
    # each exactly once, in the order they were stored: row 7 on the first retry, row 3 on the second
    assert fake.bodies() == [f"row {i}" for i in range(10) if i not in (3, 7)] + ["row 7", "row 3"]
    assert [(s.key, s.size) for s in fake.requests] == [
        ("job1:p3:b0", 10),
        (subset_key("job1:p3:b0", [3, 7]), 2),
        (subset_key("job1:p3:b0", [3]), 1),
    ]
    assert len(sleeps) == 2
    assert (report.sent, report.failed_retried, report.requests) == (10, 3, 3)


def test_a_rerun_after_failed_items_repeats_only_that_batch(client: SidecarClient, fake: FakeSidecar) -> None:
    """The sidecar does not keep answers with FAILED items, so a re-run re-sends that whole batch:
    at-least-once for it (never lost), exactly-once for the others."""
    fake.fail_times = {"row 12": 1}
    publisher(client, batch_size=10).publish(rows(30))
    publisher(client, batch_size=10).publish(rows(30))
    counts = {b: fake.bodies().count(b) for b in set(fake.bodies())}
    assert set(counts) == {f"row {i}" for i in range(30)}
    assert {b for b, n in counts.items() if n > 1} == {f"row {i}" for i in range(10, 20)}


def test_items_failing_beyond_max_retries_fail_the_task_naming_rows(
    client: SidecarClient, fake: FakeSidecar
) -> None:
    fake.fail_times = {"row 4": 100}
    with pytest.raises(
        GaveUpError, match=r"partition 3: 1 rows still FAILED after 5 retries \(rows \['r4'\]\)"
    ):
        publisher(client, batch_size=3, rowIdColumn="id").publish(rows(6))


def test_rejected_rows_are_counted_and_named_by_index_or_row_id(
    client: SidecarClient, fake: FakeSidecar
) -> None:
    data = rows(12)
    data[1]["body"] = ""
    data[10]["body"] = None
    by_index = publisher(client, batch_size=5).publish(data)
    assert (by_index.rows, by_index.sent, by_index.rejected) == (12, 10, 2)
    assert [x.row for x in by_index.rejections] == [1, 10]
    builder = MessageBuilder(WriteOptions(topic="T", columns={"bodyColumn": "body", "rowIdColumn": "id"}))
    by_id = PartitionPublisher(client, builder, "job2:p0", 0, batch_size=5).publish(data)
    assert [x.row for x in by_id.rejections] == ["r1", "r10"]


def test_an_empty_or_null_body_is_refused_here_naming_the_column_and_never_posted(
    client: SidecarClient, fake: FakeSidecar
) -> None:
    """An empty CSV field reads as null: the sidecar would only say its bodyBase64 is empty."""
    data = [{"id": "r0", "text": "a"}, {"id": "r1", "text": None}, {"id": "r2", "text": ""}]
    data += [{"id": "r3", "text": b""}, {"id": "r4", "text": "b"}]
    builder = MessageBuilder(WriteOptions(topic="T", columns={"bodyColumn": "text", "rowIdColumn": "id"}))
    report = PartitionPublisher(client, builder, "job3:p0", 0).publish(data)
    assert (report.rows, report.sent, report.rejected, report.requests) == (5, 2, 3, 1)
    assert [(x.row, x.error) for x in report.rejections] == [
        (r, "the body is empty (column 'text')") for r in ("r1", "r2", "r3")
    ]
    assert [s.size for s in fake.requests] == [2] and fake.bodies() == ["a", "b"]


def test_changed_rows_under_the_same_keys_fail_the_task_saying_why(client: SidecarClient) -> None:
    publisher(client).publish(rows(3))
    with pytest.raises(SidecarError, match="an earlier attempt of this write sent other rows") as info:
        publisher(client).publish(rows(3, start=100))
    assert info.value.status == 422 and "sortWithinPartitions" in str(info.value)


def test_batches_are_also_cut_by_bytes(client: SidecarClient, fake: FakeSidecar) -> None:
    data = [{"body": "x" * 1000}, {"body": "y" * 1000}, {"body": "z" * 5000}, {"body": "w" * 10}]
    report = publisher(client, batch_size=500, batch_bytes=2100).publish(data)
    # {"topic":"T","body":"..."} is 1025 bytes for a 1000-byte body; the 5000-byte one goes alone
    assert [s.size for s in fake.requests] == [2, 1, 1]
    assert report.sent == 4 and fake.bodies() == [d["body"] for d in data]


def id_rows(offsets: range) -> list[dict[str, Any]]:
    return [{"id": origin_id("Src", "broker-a", 0, i), "body": f"row {i}"} for i in offsets]


def test_with_an_id_column_keys_name_the_rows_not_their_place(
    client: SidecarClient, fake: FakeSidecar
) -> None:
    """The same rows posted by another partition, micro-batch or job attempt (another prefix of
    positional keys) map to the same keys; each message carries its id."""
    builder = MessageBuilder(WriteOptions(topic="T", columns={"bodyColumn": "body", "idColumn": "id"}))
    first = PartitionPublisher(client, builder, "q1", 3, batch_size=10).publish(id_rows(range(25)))
    again = PartitionPublisher(client, builder, "q1", 7, batch_size=10).publish(id_rows(range(25)))
    ids = [origin_id("Src", "broker-a", 0, i) for i in range(25)]
    assert [s.key for s in fake.requests[:3]] == [
        ids_key("q1", ids[:10]),
        ids_key("q1", ids[10:20]),
        ids_key("q1", ids[20:]),
    ]
    assert [s.key for s in fake.requests[3:]] == [s.key for s in fake.requests[:3]]
    assert (first.sent, again.sent, again.deduplicated) == (25, 0, 25)
    assert len(fake.stored) == 25
    assert ids_key("q1", ids[:10]) != ids_key("q1", ids[1:11])
    assert ids_key("q1", ids[:10]).startswith("q1:i") and len(ids_key("q1", ids[:10])) == len("q1:i") + 32


def test_a_row_without_an_id_is_refused_naming_the_column(client: SidecarClient, fake: FakeSidecar) -> None:
    builder = MessageBuilder(WriteOptions(topic="T", columns={"bodyColumn": "body", "idColumn": "id"}))
    data = [*id_rows(range(2)), {"id": None, "body": "x"}, {"id": "", "body": "y"}]
    report = PartitionPublisher(client, builder, "q2", 0).publish(data)
    assert (report.sent, report.rejected) == (2, 2)
    assert {x.error for x in report.rejections} == {"the id is empty (column 'id')"}
    assert fake.bodies() == ["row 0", "row 1"]


def test_rows_an_answer_does_not_account_for_are_not_counted_as_published(sleeps: list[float]) -> None:
    """The first answer names index 0 twice, the second time with a status this client does not know,
    and never index 1: the row vanished from the counts (rows 1, accepted 1 for 2 rows in) and
    publish_job exited 0. Both rows are posted again instead, alone, and counted once stored."""
    posted: list[list[str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies = [m["body"] for m in orjson.loads(request.content)["messages"]]
        posted.append(bodies)
        if len(posted) == 1:
            results = [{"index": 0, "status": "SENT", "id": "a"}, {"index": 0, "status": "QUEUED"}]
        else:
            results = [{"index": i, "status": "SPOOLED", "id": b} for i, b in enumerate(bodies)]
        return httpx.Response(200, json={"results": results})

    with SidecarClient("http://s", transport=httpx.MockTransport(answer), sleep=sleeps.append) as client:
        report = publisher(client).publish(rows(2))
    assert posted == [["row 0", "row 1"], ["row 0", "row 1"]]
    assert (report.rows, report.accepted, report.sent, report.spooled, report.failed_retried) == (
        2,
        2,
        0,
        2,
        2,
    )
    with SidecarClient("http://s", transport=httpx.MockTransport(answer), max_retries=0) as client:
        posted.clear()
        with pytest.raises(GaveUpError, match=r"2 rows still FAILED .* 2 results for message 0"):
            publisher(client).publish(rows(2))
