"""An answer repeated for an Idempotency-Key says so (`Idempotent-Replayed: true`), so a client such as
spark-publish can count those messages as deduplicated rather than sent (issue 17 item 12)."""

from __future__ import annotations

import asyncio

from tests.app.conftest import Stack


async def test_only_a_repeated_answer_is_marked(stack: Stack) -> None:
    doc = {"messages": [{"topic": "IdemH", "body": "once"}]}
    first = await stack.http.post("/v1/messages:batch", json=doc, headers={"Idempotency-Key": "h-1"})
    again = await stack.http.post("/v1/messages:batch", json=doc, headers={"Idempotency-Key": "h-1"})
    plain = await stack.http.post("/v1/messages:batch", json=doc)
    assert first.status_code == again.status_code == plain.status_code == 200
    assert "idempotent-replayed" not in first.headers and "idempotent-replayed" not in plain.headers
    assert again.headers["idempotent-replayed"] == "true" and again.json() == first.json()
    assert len(stack.stored("IdemH")) == 2  # the first and the one without a key


async def test_concurrent_repeats_are_marked_all_but_one(stack: Stack) -> None:
    doc = {"topic": "IdemHC", "body": "x"}
    answers = await asyncio.gather(
        *(stack.http.post("/v1/messages", json=doc, headers={"Idempotency-Key": "h-c"}) for _ in range(4))
    )
    assert sorted(a.headers.get("idempotent-replayed", "") for a in answers) == ["", "true", "true", "true"]
    assert len(stack.stored("IdemHC")) == 1
