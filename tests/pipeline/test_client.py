"""SidecarClient against the fake sidecar: answers per item, repeats after 429/503/5xx and dropped
connections with the same key and bytes, Retry-After, and errors that must not be repeated."""

from __future__ import annotations

import httpx
import pytest

from rocksidecar.pipeline.backoff import Backoff
from rocksidecar.pipeline.client import GaveUpError, SidecarClient, SidecarError
from tests.pipeline.fake_sidecar import FakeSidecar


def msgs(*bodies: str) -> list[dict[str, object]]:
    return [{"topic": "T", "body": b} for b in bodies]


def test_one_result_per_message_in_order(client: SidecarClient, fake: FakeSidecar) -> None:
    results = client.post_batch(msgs("a", "", "c"), key="k1")
    assert [r.status for r in results] == ["SENT", "REJECTED", "SENT"]
    assert results[0].id == fake.stored[0]["id"] and results[2].id == fake.stored[1]["id"]
    assert results[1].error == "messages[1].body: the body is empty or missing"
    assert [r.stored for r in results] == [True, False, True]
    assert fake.bodies() == ["a", "c"]


def test_same_key_twice_stores_once_and_returns_the_first_ids(
    client: SidecarClient, fake: FakeSidecar
) -> None:
    first = client.post_batch(msgs("a", "b"), key="k1")
    again = client.post_batch(msgs("a", "b"), key="k1")
    assert not any(r.replayed for r in first) and all(r.replayed for r in again)
    assert [(r.status, r.id) for r in again] == [(r.status, r.id) for r in first]
    assert fake.bodies() == ["a", "b"]


def test_unavailable_phases_are_waited_out_with_retry_after_or_back_off(
    client: SidecarClient, fake: FakeSidecar, sleeps: list[float]
) -> None:
    fake.unavailable.extend([(503, "3"), (429, "1"), (503, None), (500, None)])
    results = client.post_batch(msgs("a"), key="k1")
    assert [r.status for r in results] == ["SENT"]
    assert sleeps[:2] == [2.0, 1.0]  # Retry-After 3 capped by max_s=2.0, then Retry-After 1
    assert 0.2 <= sleeps[2] <= 0.4 and 0.4 <= sleeps[3] <= 0.8  # retries 3 and 4: exponential, jittered
    assert [s.status for s in fake.requests] == [503, 429, 503, 500, 200]
    assert {s.key for s in fake.requests} == {"k1"}
    assert fake.bodies() == ["a"]


def test_an_answer_lost_after_storing_is_recovered_by_the_key(
    client: SidecarClient, fake: FakeSidecar, sleeps: list[float]
) -> None:
    fake.drop_after_store = 1  # stored, then the connection closes before the answer
    results = client.post_batch(msgs("a", "b"), key="k1")
    assert [r.status for r in results] == ["SENT", "SENT"]
    assert len(sleeps) == 1
    assert fake.bodies() == ["a", "b"]  # the repeat was answered from the kept answer


def test_gives_up_after_max_retries(fake: FakeSidecar, fake_url: str, sleeps: list[float]) -> None:
    fake.unavailable.extend([(503, "0")] * 10)
    with (
        SidecarClient(fake_url, max_retries=3, sleep=sleeps.append) as c,
        pytest.raises(GaveUpError, match="3 retries"),
    ):
        c.post_batch(msgs("a"), key="k1")
    assert len(fake.requests) == 4 and sleeps == [0.0, 0.0, 0.0]


def test_connection_refused_is_retried_then_given_up(sleeps: list[float]) -> None:
    client = SidecarClient("http://127.0.0.1:9", max_retries=2, sleep=sleeps.append)
    with client, pytest.raises(GaveUpError, match="ConnectError"):
        client.post_batch(msgs("a"))
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    ("messages", "status", "text"),
    [
        ([{"topic": "T", "body": "a", "bogus": 1}], 400, r"messages\[0\]\.bogus"),
        (msgs(*["x"] * 1001), 413, "1 to 1000"),
    ],
)
def test_a_refused_request_is_not_repeated(
    client: SidecarClient,
    fake: FakeSidecar,
    sleeps: list[float],
    messages: list[dict[str, object]],
    status: int,
    text: str,
) -> None:
    with pytest.raises(SidecarError, match=text) as info:
        client.post_batch(messages, key="k")
    assert info.value.status == status and not isinstance(info.value, GaveUpError)
    assert len(fake.requests) == 1 and sleeps == []


def test_a_key_reused_for_other_rows_is_an_error(client: SidecarClient) -> None:
    client.post_batch(msgs("a"), key="k1")
    with pytest.raises(SidecarError, match="Idempotency-Key reused") as info:
        client.post_batch(msgs("b"), key="k1")
    assert info.value.status == 422


def test_bearer_token_and_spool_ack(fake: FakeSidecar, fake_url: str) -> None:
    fake.token = "s3cret"
    with SidecarClient(fake_url, token="wrong", max_retries=0) as c, pytest.raises(SidecarError, match="401"):
        c.post_batch(msgs("a"))
    with SidecarClient(fake_url, token="s3cret", ack="spool") as c:
        assert [r.status for r in c.post_batch(msgs("a"))] == ["SPOOLED"]


def test_an_unreadable_answer_is_an_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"results": [{"index": 0}]}))
    short = SidecarClient("http://sidecar", transport=transport)
    with short, pytest.raises(SidecarError, match="1 results for 2 messages"):
        short.post_batch(msgs("a", "b"))
    garbled = httpx.MockTransport(lambda request: httpx.Response(200, content=b"<html>"))
    html = SidecarClient("http://sidecar", transport=garbled)
    with html, pytest.raises(SidecarError, match="unreadable"):
        html.post_batch(msgs("a"))


def test_back_off_grows_to_its_cap_and_honours_retry_after() -> None:
    b = Backoff(initial_s=1.0, max_s=8.0)
    for attempt, ceiling in enumerate([1, 2, 4, 8, 8, 8]):
        assert ceiling / 2 <= b.delay(attempt) <= ceiling
    assert b.delay(0, retry_after_s=5) == 5 and b.delay(0, retry_after_s=60) == 8.0


def test_an_item_the_answer_does_not_account_for_is_failed_not_stored() -> None:
    """An answer of the right length with index 0 twice (index 1 never answered), a status this client
    does not know, and an index past the batch: those messages were not confirmed stored."""
    results = [
        {"index": 0, "status": "SENT", "id": "a"},
        {"index": 0, "status": "SENT", "id": "a2"},
        {"index": 2, "status": "QUEUED", "id": "c"},
        {"index": 3, "status": "SPOOLED", "id": "d"},
        {"index": True, "status": "SENT", "id": "e"},
        {"index": 9, "status": "SENT", "id": "f"},
    ]
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"results": results}))
    with SidecarClient("http://sidecar", transport=transport) as c:
        got = c.post_batch(msgs("a", "b", "c", "d", "e", "f"))
    assert [(r.status, r.stored) for r in got] == [("FAILED", False)] * 3 + [("SPOOLED", True)] + [
        ("FAILED", False)
    ] * 2
    assert [r.error for r in got[:3]] == [
        "the sidecar's answer has 2 results for message 0",
        "the sidecar's answer has no results for message 1",
        "the sidecar's answer has the unknown status 'QUEUED' for message 2",
    ]
