"""A message whose request no frame can carry (over MAX_FRAME_BYTES after compression: Java's
NettyDecoder reads no larger frame, nor does ours) is refused at send time, 422, and nothing is spooled:
max_body_bytes may be set up to 64 MiB because a compressible body that large still fits a frame once
zlib'd, so the limit is the encoder's (rmq.errors.RequestTooLarge, final). The encoder's refusal is ours,
raised before a byte is written: it isolates no broker (review of session 29; before, a transport error,
retried on every broker, each isolated as unreachable, then spooled and replayed to the dead letters)."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any

from rocksidecar.rmq.protocol.frame import MAX_FRAME_BYTES

BIG = 24 * 1024 * 1024  # max_body_bytes above a frame


async def test_a_body_no_broker_frame_can_carry_is_refused_not_spooled(
    make_stack: Callable[..., Any],
) -> None:
    size = MAX_FRAME_BYTES + 1024  # incompressible: zlib cannot bring it under the frame limit
    async with make_stack(max_body_bytes=BIG) as stack:
        body = base64.b64encode(os.urandom(size)).decode()
        r = await stack.http.post("/v1/messages", json={"topic": "Big", "bodyBase64": body})
        assert r.status_code == 422, (r.status_code, r.text[:300])
        assert stack.service.retry.stats().pending == 0


async def test_a_compressible_body_past_a_frame_is_still_sent(make_stack: Callable[..., Any]) -> None:
    """Why max_body_bytes is not capped at a frame: compressed, a larger body fits one."""
    async with make_stack(max_body_bytes=BIG) as stack:
        body = base64.b64encode(b"z" * (MAX_FRAME_BYTES + 1024)).decode()
        r = await stack.http.post("/v1/messages", json={"topic": "Big", "bodyBase64": body})
        assert r.status_code == 200, (r.status_code, r.text[:300])


async def test_a_message_too_large_to_encode_isolates_no_broker(make_stack: Callable[..., Any]) -> None:
    size = MAX_FRAME_BYTES + 1024
    async with make_stack(max_body_bytes=BIG) as stack:
        states: list[tuple[str, str]] = []
        fault = stack.service.producer.fault
        told = fault.on_change

        def listen(broker: str, state: str, reason: str, backoff_s: float) -> None:
            states.append((broker, state))
            if told is not None:
                told(broker, state, reason, backoff_s)

        fault.on_change = listen
        body = base64.b64encode(os.urandom(size)).decode()
        await stack.http.post("/v1/messages", json={"topic": "Big", "bodyBase64": body})
        assert [s for s in states if s[1] == "isolated"] == [], states


async def test_in_a_batch_only_the_message_no_frame_can_carry_is_refused(
    make_stack: Callable[..., Any],
) -> None:
    async with make_stack(max_body_bytes=BIG) as stack:
        huge = base64.b64encode(os.urandom(MAX_FRAME_BYTES + 1024)).decode()
        doc = {"messages": [{"topic": "Big", "body": "a"}, {"topic": "Big", "bodyBase64": huge}]}
        r = await stack.http.post("/v1/messages:batch", json=doc)
        results = r.json()["results"]
        assert [x["status"] for x in results] == ["SENT", "REJECTED"], r.text[:600]
        assert results[1]["error"]["status"] == 422, results[1]
        assert stack.service.retry.stats().pending == 0
