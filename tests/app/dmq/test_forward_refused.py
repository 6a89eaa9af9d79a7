"""In service mode a delayed message is wrapped for the Rock-DMQ inner topic, which adds properties (its
real topic, due time and sharding key, up to 1 024 characters) past the 256 bytes the API's check leaves
for the broker. One that no longer fits, or that the broker refuses for good, is answered 422, alone in a
batch, and is neither spooled nor recorded as forwarded (review of session 29: Forwarder.schedule_many
spooled every failure, final or not: 202 SCHEDULED, then retried for the whole ladder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rocksidecar.rmq.message import PROPERTIES_LIMIT
from tests.fakes import fullest_message


def _too_large(topic: str) -> dict[str, Any]:
    full = fullest_message(topic, PROPERTIES_LIMIT)  # the API's own bound, as the app may fill it
    return {
        "topic": topic,
        "body": "x",
        "properties": {"p": full.properties["p"]},
        "delayMs": 60_000,
        "shardingKey": "k" * 1024,
    }


async def test_a_delayed_message_the_inner_topic_cannot_carry_is_refused_not_scheduled(
    make_stack: Callable[..., Any],
) -> None:
    async with make_stack(delay_mode="service") as stack:
        r = await stack.http.post("/v1/messages", json=_too_large("T"))
        assert r.status_code == 422, (r.status_code, r.text[:300])
        assert stack.service.retry.stats().pending == 0


async def test_in_a_batch_only_the_message_the_inner_topic_cannot_carry_is_refused(
    make_stack: Callable[..., Any],
) -> None:
    async with make_stack(delay_mode="service") as stack:
        good = {"topic": "T", "body": "y", "delayMs": 60_000}
        r = await stack.http.post("/v1/messages:batch", json={"messages": [good, _too_large("T"), good]})
        results = r.json()["results"]
        assert [x["status"] for x in results] == ["SCHEDULED", "REJECTED", "SCHEDULED"], r.text[:600]
        assert stack.service.retry.stats().pending == 0
        assert results[1]["error"]["status"] == 422, results[1]
        scheduled = await stack.http.get(f"/v1/messages/{results[0]['id']}")
        assert scheduled.json()["status"] == "SCHEDULED", scheduled.text
