"""Order of one sharding key's messages in a batch spooled or delayed together (session 31 review).

A batch's ids share one time stamp and end in a 16-bit counter (rmq/msgid.py). The retry store orders its
keys due:count:type:id and the delay store due:id, so a batch of one key that shares a due time is replayed
or published in id order: a batch whose counter wrapped inside it (about 1 in 65 of 1000-message batches)
had its tail first. Also: README says plainly what the sidecar does not order (a key's spooled messages
against its later ones).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rocksidecar.rmq import msgid
from tests.app.conftest import Stack

KEY = "customer-7"
ROOT = Path(__file__).resolve().parents[2]


def _key_queue_order(stack: Stack, topic: str, bodies: set[bytes]) -> list[str]:
    """The bodies of ``bodies`` as the broker stored them: all on one queue (asserted), by queue offset."""
    found = [
        (name, m.queue_id, m.queue_offset, m.body)
        for name, b in stack.cluster.brokers.items()
        for m in b.messages(topic)
        if m.body in bodies
    ]
    assert len(found) == len(bodies), f"not every message was stored once: {found}"
    queues = {(name, q) for name, q, _, _ in found}
    assert len(queues) == 1, f"one sharding key, several queues: {queues}"
    return [body.decode() for *_, body in sorted(found, key=lambda f: f[2])]


async def _warm(stack: Stack, topic: str) -> None:
    """Create the topic (its route) first, so every send below uses the same queue count."""
    r = await stack.http.post("/v1/messages", json={"topic": topic, "body": "warm-up"})
    assert r.status_code == 200, r.text


async def test_a_batch_of_one_key_spooled_together_is_replayed_in_its_order_across_the_id_counter_wrap(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one sharding key spooled together (ack=spool here; a batch that failed in an outage
    alike) shares one due time, and the retry store orders its keys due:count:type:id, so the replay
    sends the batch in id order. The counter is set just before the wrap here."""
    topic = "OrderedWrap"
    await _warm(stack, topic)
    monkeypatch.setattr(msgid._default, "_counter", itertools.count(0xFFFE))
    msgs = [{"topic": topic, "body": f"m{i}", "shardingKey": KEY} for i in range(4)]
    r = await stack.http.post("/v1/messages:batch", params={"ack": "spool"}, json={"messages": msgs})
    assert r.status_code == 200, r.text
    assert [x["status"] for x in r.json()["results"]] == ["SPOOLED"] * 4
    await stack.drain()
    assert _key_queue_order(stack, topic, {f"m{i}".encode() for i in range(4)}) == ["m0", "m1", "m2", "m3"]


async def test_a_delayed_batch_of_one_key_with_one_due_time_is_published_in_its_order_across_the_wrap(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delay store orders its due keys due:id (delay/keys.py due_key): messages of one key due at the
    same millisecond (a batch with one deliverAt, or one delayMs: one clock read per batch) are published
    in id order, and a batch's ids wrapped at the 16-bit counter like above."""
    topic = "OrderedDelayWrap"
    await _warm(stack, topic)
    monkeypatch.setattr(msgid._default, "_counter", itertools.count(0xFFFE))
    msgs = [{"topic": topic, "body": f"m{i}", "shardingKey": KEY, "delayMs": 50} for i in range(4)]
    r = await stack.http.post("/v1/messages:batch", json={"messages": msgs})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["SCHEDULED"] * 4
    await stack.until_published(max(x["deliverAt"] for x in results))
    assert _key_queue_order(stack, topic, {f"m{i}".encode() for i in range(4)}) == ["m0", "m1", "m2", "m3"]


def test_readme_says_a_spooled_message_of_a_key_can_be_stored_after_later_ones() -> None:
    """Not ordered (a design change for another day: a per-key FIFO through the retry store): a message
    of a sharding key answered 202 SPOOLED, or a delayed one whose publish failed, is stored when the
    retry store replays it, after later messages of its key sent directly, and the back-off ladder can
    replay a key's spooled messages out of their order. README says so, and what an app can do."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "A spooled message of a sharding key loses its place in the key's order" in readme
    assert "the back-off ladder can replay a key's spooled messages out of their order" in readme
    assert "So can a delayed message whose publish failed" in readme
    assert (
        "sends nothing more of that key after a `202 SPOOLED` until `GET /v1/messages/{id}` (gRPC"
        " `GetMessage`) of that message says `SENT`" in readme
    ), "README's sentence changed"
