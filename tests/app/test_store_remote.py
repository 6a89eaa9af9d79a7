"""``rocksidecar store dead redrive --all`` through the API goes on with the answer's nextCursor (a
redrive answers within its deadline), with the same snapshot, and sums what each call did."""

from __future__ import annotations

import httpx
import orjson

from rocksidecar.app.store_remote import Remote


def test_redrive_all_continues_with_the_cursor() -> None:
    bodies: list[dict[str, object]] = []
    answers = [
        {"redriven": 3, "skipped": 1, "stillDead": 9, "nextCursor": "c1"},
        {"redriven": 2, "skipped": 0, "stillDead": 5, "nextCursor": None},
    ]

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/admin/dead-letters:redrive"
        bodies.append(orjson.loads(request.content))
        return httpx.Response(200, json=answers[len(bodies) - 1])

    remote = Remote("http://sidecar", token="")
    remote._client = httpx.Client(base_url="http://sidecar", transport=httpx.MockTransport(handle))
    try:
        text = remote.redrive(None, True)
    finally:
        remote.close()
    assert bodies == [{"all": True}, {"all": True, "cursor": "c1"}]
    assert text == "re-drove 5 dead letter(s); skipped 1 corrupt; 5 still dead"
