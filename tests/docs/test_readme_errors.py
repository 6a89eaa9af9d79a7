"""README's "HTTP API" sentence on errors, against a real sidecar (a Service over an in-process
devbroker): every error is problem+json; one about an input names it in `field`; the ones README lists
as having no input to name (malformed JSON, an unknown route or method) carry no `field` at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.app.conftest import make_stack  # noqa: F401  (the fixture)
from tests.docs.readme import README

SENTENCE = (
    "`application/problem+json`, with a `field` naming the offending input where there is one (not for\n"
    "malformed JSON, an unknown route or method)."
)


async def test_errors_name_the_offending_input_where_there_is_one(make_stack: Callable[..., Any]) -> None:  # noqa: F811
    assert SENTENCE in README.read_text(), "README's sentence changed: change this test with it"
    json = {"content-type": "application/json"}
    async with make_stack() as s:
        named = {
            "topic": await s.http.post("/v1/messages", content=b'{"topic": 5, "body": "x"}', headers=json),
            "Content-Type": await s.http.post(
                "/v1/messages", content=b'{"topic": "T", "body": "x"}', headers={"content-type": "text/plain"}
            ),
        }
        unnamed = {
            "malformed JSON": await s.http.post("/v1/messages", content=b"{not json", headers=json),
            "unknown route": await s.http.get("/v1/nothing"),
            "unknown method": await s.http.put("/v1/messages"),
        }
    for answer in [*named.values(), *unnamed.values()]:
        assert answer.status_code >= 400 and answer.headers["content-type"] == "application/problem+json"
    assert {k: r.json().get("field") for k, r in named.items()} == {k: k for k in named}
    assert {k: "field" in r.json() for k, r in unnamed.items()} == dict.fromkeys(unnamed, False)
