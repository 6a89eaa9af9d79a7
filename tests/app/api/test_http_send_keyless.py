"""``POST /v1/messages`` without an Idempotency-Key is answered in one coroutine rather than through
Api.answer (issue 32): its answers must be the ones the keyed path gives a first request, in every
class (sent, spooled, rejected, refused by a failing store), and counted alike."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from tests.app.api.test_http_fast_path import _normal
from tests.app.conftest import Stack

_KEYS = itertools.count()


async def _both(stack: Stack, params: dict[str, str], body: bytes) -> list[tuple[int, dict[str, str], Any]]:
    out = []
    for key in (None, f"k{next(_KEYS)}"):
        headers = {"content-type": "application/json"} | ({} if key is None else {"idempotency-key": key})
        r = await stack.http.post("/v1/messages", params=params, content=body, headers=headers)
        kept = {k: v for k, v in r.headers.items() if k not in ("date", "server")}
        doc = _normal(orjson.loads(r.content))
        if "lastError" in doc:  # names the broker that failed last, one of two
            assert doc["lastError"].startswith("cannot connect to ")
            doc["lastError"] = "*"
        out.append((r.status_code, kept, doc))
    return out


def _sent_count(text: str, outcome: str) -> float:
    line = f'rocksidecar_messages_total{{outcome="{outcome}"}} '
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line))


async def test_keyless_answers_are_the_keyed_first_answers(stack: Stack) -> None:
    one = b'{"topic": "T", "body": "x"}'
    cases: list[tuple[dict[str, str], bytes]] = [
        ({}, one),  # SENT
        ({"ack": "spool"}, one),  # SPOOLED
        ({"ack": "never"}, one),  # 400 on the ack
        ({}, b'{"topic": "", "body": "x"}'),  # 400 on the topic
        ({}, b'{"topic": "T", "body": '),  # malformed
    ]
    for params, body in cases:
        keyless, keyed = await _both(stack, params, body)
        assert keyless == keyed, (params, body)
    await stack.stop_brokers()
    keyless, keyed = await _both(stack, {}, one)  # every attempt fails: spooled, with its error
    assert keyless == keyed and keyless[0] == 202 and keyless[2]["status"] == "SPOOLED"
    stack.kv.sync_fault = "IO error: No space left on device"
    keyless, keyed = await _both(stack, {}, one)  # and the spool too: 503 with Retry-After
    assert keyless == keyed and keyless[0] == 503 and keyless[1]["retry-after"]
    stack.kv.sync_fault = None
    await stack.start_brokers()
    metrics = (await stack.http.get("/metrics")).text
    assert _sent_count(metrics, "sent") == 2 and _sent_count(metrics, "spooled") == 4
    assert _sent_count(metrics, "rejected") == 6 and _sent_count(metrics, "failed") == 2
