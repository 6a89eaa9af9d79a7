"""``rocksidecar store dead redrive --all`` through the API goes on with the answer's nextCursor (a
redrive answers within its deadline), with the same snapshot, and sums what each call did."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson
import pytest

from rocksidecar.app.http_client import Answer, HttpClient
from rocksidecar.app.store_remote import RefusedError, Remote, RemoteError


class FakeSidecar(HttpClient):
    """Answers from a list, in order, and records each request."""

    def __init__(self, *answers: tuple[int, object]) -> None:
        super().__init__()
        self.answers = list(answers)
        self.requests: list[tuple[str, str, object, Mapping[str, str]]] = []

    async def request(  # type: ignore[override]
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float, method: str = "POST"
    ) -> Answer:
        self.requests.append((method, url, orjson.loads(body) if body else None, headers))
        status, doc = self.answers.pop(0)
        return Answer(status, {}, orjson.dumps(doc))


async def test_redrive_all_continues_with_the_cursor() -> None:
    sidecar = FakeSidecar(
        (200, {"redriven": 3, "skipped": 1, "stillDead": 9, "nextCursor": "c1"}),
        (200, {"redriven": 2, "skipped": 0, "stillDead": 5, "nextCursor": None}),
    )
    remote = Remote("http://sidecar/", token="t0k", client=sidecar)
    try:
        text = await remote.redrive(None, True)
    finally:
        await remote.close()
    assert [(m, u, b) for m, u, b, _ in sidecar.requests] == [
        ("POST", "http://sidecar/v1/admin/dead-letters:redrive", {"all": True}),
        ("POST", "http://sidecar/v1/admin/dead-letters:redrive", {"all": True, "cursor": "c1"}),
    ]
    assert sidecar.requests[0][3]["authorization"] == "Bearer t0k"
    assert text == "re-drove 5 dead letter(s); skipped 1 corrupt; 5 still dead"


async def test_a_query_and_an_id_are_encoded_and_a_problem_names_its_detail() -> None:
    sidecar = FakeSidecar((200, {"items": [], "nextCursor": None}), (404, {"detail": "no message a/b?c"}))
    remote = Remote("http://sidecar", token="", client=sidecar)
    assert await remote.dead_list(5000, as_json=True) == []
    with pytest.raises(RemoteError, match="answered 404: no message a/b\\?c"):
        await remote.inspect("a/b?c")
    await remote.close()
    assert [(m, u) for m, u, _, _ in sidecar.requests] == [
        ("GET", "http://sidecar/v1/admin/retries?state=dead&limit=1000"),  # the limit is capped
        ("GET", "http://sidecar/v1/admin/messages/a%2Fb%3Fc"),
    ]


async def test_json_of_another_shape_is_a_remote_error_naming_what_is_wrong() -> None:
    """Something else answering on the port (a JSON list, items that are not objects) is a RemoteError,
    never a TypeError or AttributeError from reading its fields."""
    sidecar = FakeSidecar(
        (200, ["not", "stats"]),
        (200, ["not", "stats"]),
        (200, {"items": ["not an object"]}),
        (200, {"redriven": 1, "skipped": "many"}),
    )
    remote = Remote("http://other", token="", client=sidecar)
    assert not await remote.serves(Path("/data/store"))  # not ours: the CLI reads the store itself
    with pytest.raises(RemoteError, match=r"^http://other/v1/admin/stats answered JSON of another shape"):
        await remote.stats()
    with pytest.raises(RemoteError, match=r"^http://other/v1/admin/retries answered JSON of another shape"):
        await remote.dead_list(10, as_json=False)
    with pytest.raises(RemoteError, match=r"dead-letters:redrive answered JSON of another shape"):
        await remote.redrive(None, True)
    await remote.close()


async def test_a_refusal_is_its_own_error_and_a_401_names_the_token_variable() -> None:
    """The CLI must not take a sidecar that refused it (401, 403) for no sidecar at all: RefusedError."""
    sidecar = FakeSidecar(
        (401, {"detail": "a valid bearer token is required"}),
        (401, {"detail": "a valid bearer token is required"}),
        (403, {"detail": "this Host is not served here (see allowed_hosts)"}),
    )
    without, wrong = (
        Remote("http://s", token="", client=sidecar),
        Remote("http://s", token="x", client=sidecar),
    )
    with pytest.raises(
        RefusedError, match=r"^the sidecar at http://s requires a token \(it answered 401\): set "
    ):
        await without.serves(Path("/data/store"))
    with pytest.raises(RefusedError, match=r"answered 401: ROCKSIDECAR_AUTH_TOKEN is not its token$"):
        await wrong.stats()
    with pytest.raises(RefusedError, match=r"answered 403: this Host is not served here"):
        await without.replay(None)
    await without.close()
    await wrong.close()
