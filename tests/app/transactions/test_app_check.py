"""The app's check endpoint (issue 29): COMMIT/ROLLBACK/UNKNOWN taken as answered; any other answer is
UNKNOWN (never a decision), and only endpoints on this machine are accepted."""

from __future__ import annotations

import httpx
import orjson
import pytest

from rocksidecar.app.transactions.app_check import AppCheck
from rocksidecar.rmq.producer.transaction import TransactionState

URL = "http://127.0.0.1:8080/tx-check"


def check(reply: httpx.Response, seen: list[dict[str, object]] | None = None) -> AppCheck:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(orjson.loads(request.content))
        return reply

    return AppCheck(URL, httpx.AsyncClient(transport=httpx.MockTransport(handler)))


@pytest.mark.parametrize("state", list(TransactionState))
async def test_answers_are_taken(state: TransactionState) -> None:
    seen: list[dict[str, object]] = []
    answer = await check(httpx.Response(200, json={"state": state.name}), seen)("id1", "order-1", "T")
    assert answer is state
    assert seen == [{"id": "id1", "transactionKey": "order-1", "topic": "T"}]


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(500, json={"state": "COMMIT"}),
        httpx.Response(200, json={"state": "commit please"}),
        httpx.Response(200, json=["COMMIT"]),
        httpx.Response(200, content=b"not json"),
        httpx.Response(200, content=b'{"state": "COMMIT", "pad": "' + b"x" * 5000 + b'"}'),
    ],
)
async def test_anything_else_is_unknown(reply: httpx.Response) -> None:
    assert await check(reply)("id1", None) is TransactionState.UNKNOWN


async def test_unreachable_app_is_unknown() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(refuse))
    assert await AppCheck(URL, client)("id1", None) is TransactionState.UNKNOWN


@pytest.mark.parametrize("url", ["http://example.com/check", "ftp://127.0.0.1/x", "http://127.0.0.1.nip.io/"])
def test_only_local_endpoints(url: str) -> None:
    with pytest.raises(ValueError, match="check_endpoint"):
        AppCheck(url, httpx.AsyncClient())
