"""The app's check endpoint (issue 29): COMMIT/ROLLBACK/UNKNOWN taken as answered; any other answer is
UNKNOWN (never a decision), and only endpoints on this machine are accepted."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rocksidecar.app.http_client import Answer, HttpClient, PostError
from rocksidecar.app.transactions.app_check import MAX_IN_FLIGHT, MAX_WAITING, AppCheck
from rocksidecar.rmq.producer.transaction import TransactionState
from tests.app.push_app import push_app

URL = "http://127.0.0.1:8080/tx-check"


class FakeClient(HttpClient):
    """Answers every request with ``reply`` (or raises it), recording the bodies."""

    def __init__(self, reply: Answer | PostError) -> None:
        super().__init__()
        self.reply = reply
        self.seen: list[dict[str, object]] = []

    async def request(  # type: ignore[override]
        self, url: str, body: bytes, headers: dict[str, str], timeout_s: float, method: str = "POST"
    ) -> Answer:
        assert url == URL and method == "POST" and headers["content-type"] == "application/json"
        self.seen.append(orjson.loads(body))
        if isinstance(self.reply, PostError):
            raise self.reply
        return self.reply


def json_answer(status: int, doc: object) -> Answer:
    return Answer(status, {"content-type": "application/json"}, orjson.dumps(doc))


@pytest.mark.parametrize("state", list(TransactionState))
async def test_answers_are_taken(state: TransactionState) -> None:
    client = FakeClient(json_answer(200, {"state": state.name}))
    assert await AppCheck(URL, client)("id1", "order-1", "T") is state
    assert client.seen == [{"id": "id1", "transactionKey": "order-1", "topic": "T"}]


@pytest.mark.parametrize(
    "reply",
    [
        json_answer(500, {"state": "COMMIT"}),
        json_answer(200, {"state": "commit please"}),
        json_answer(200, ["COMMIT"]),
        Answer(200, {}, b"not json"),
        Answer(200, {}, b'{"state": "COMMIT", "pad": "' + b"x" * 5000 + b'"}'),
        PostError("connection refused"),  # the app is down
    ],
)
async def test_anything_else_is_unknown(reply: Answer | PostError) -> None:
    assert await AppCheck(URL, FakeClient(reply))("id1", None) is TransactionState.UNKNOWN


async def test_a_real_app_over_the_http_client() -> None:
    """The real client against a real socket: each answer is read (over one kept connection)."""
    states = {"a": "COMMIT", "b": "ROLLBACK"}
    with push_app(lambda n: (200, {"content-type": "application/json"}, 0.0)) as app:
        app.respond = lambda body: orjson.dumps({"state": states[orjson.loads(body)["id"]]})
        client = HttpClient()
        try:
            check = AppCheck(app.url, client)
            answers = [await check(tx_id, None, "T") for tx_id in states]
        finally:
            await client.close()
    assert answers == [TransactionState.COMMIT, TransactionState.ROLLBACK]


@pytest.mark.parametrize("url", ["http://example.com/check", "ftp://127.0.0.1/x", "http://127.0.0.1.nip.io/"])
def test_only_local_endpoints(url: str) -> None:
    with pytest.raises(ValueError, match="check_endpoint"):
        AppCheck(url, HttpClient())


class HeldClient(HttpClient):
    """Answers COMMIT once ``release`` is set; counts the requests in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.in_flight = self.most = self.requests = 0

    async def request(  # type: ignore[override]
        self, url: str, body: bytes, headers: dict[str, str], timeout_s: float, method: str = "POST"
    ) -> Answer:
        self.requests += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        return json_answer(200, {"state": "COMMIT"})


async def settled() -> None:
    """Every task started so far has run up to what it awaits (nothing here does I/O)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_burst_of_checks_asks_the_app_a_bounded_number_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker checks every undecided half of the group in a burst, each check its own task. Each asked
    the app at once: with an app that hangs, one connection each (200 checks: 200 sockets held for the
    timeout). Now at most MAX_IN_FLIGHT ask at once; the others wait their turn, and past MAX_WAITING
    are answered UNKNOWN at once (the broker asks again later)."""
    client = HeldClient()
    check = AppCheck(URL, client)
    n = MAX_IN_FLIGHT + MAX_WAITING + 50
    asks = [asyncio.create_task(check(f"id{i}", None, "T")) for i in range(n)]
    await settled()
    assert client.most == MAX_IN_FLIGHT
    turned_away = [t for t in asks if t.done()]
    assert len(turned_away) == 50 and {t.result() for t in turned_away} == {TransactionState.UNKNOWN}
    assert len([r for r in caplog.records if "answering UNKNOWN" in r.getMessage()]) == 1  # throttled
    client.release.set()
    answers = await asyncio.gather(*asks)
    assert answers.count(TransactionState.COMMIT) == MAX_IN_FLIGHT + MAX_WAITING == client.requests
    assert client.most == MAX_IN_FLIGHT
