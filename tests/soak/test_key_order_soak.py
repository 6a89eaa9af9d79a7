"""The sharding-key soak: SIGKILL and SIGTERM cycles of `rocksidecar serve` while brokers go down and come
back, under a load that sends each sharding key's messages one after another, as an app that needs their
order does (the next only after the sidecar answered 2xx for the one before; a request without a 2xx is
sent again). Sends mix ack=broker, ack=spool, batches of consecutive messages of the key, and gRPC.

At the end the brokers are healed, the sidecar drains its store, and the brokers' queues are read back in
offset order: every acknowledged message is stored, and in each queue the first stored copy of each
message of a key comes after the first copies of the key's earlier messages there. A stopped broker
leaves the route (devbroker as 4.9.4), and a key's queue can change with it; against real brokers the
topic gets an order configuration (RealBackend.order), with which no key may change queue. Later copies
(at-least-once: a send that timed out and was stored late, a delivery whose ack a SIGKILL cut off) are
counted, not judged.
ROCKSIDECAR_TEST_SOAK_KEY_CYCLES sets the cycles per signal.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest

from bench.common import free_port
from bench.sidecar_process import sidecar_process
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from tests.soak.backends import Backend, RealBackend
from tests.soak.load import ACKED_STATUSES, GRPC_ACKED
from tests.soak.test_soak import (  # noqa: F401 - backend: the fixture
    DRAIN_TIMEOUT_S,
    FAST_LADDER,
    backend,
    cycle_load,
    pending,
)

pytestmark = [pytest.mark.soak, pytest.mark.timeout(1800)]
CYCLES = int(os.environ.get("ROCKSIDECAR_TEST_SOAK_KEY_CYCLES", "6"))  # per signal
LOAD_S = 3.0
KEYS = 16
KINDS = ("broker", "spool", "batch", "grpc")
BATCH = 3


@dataclass
class KeyLedger:
    seq_of: dict[str, tuple[str, int]] = field(default_factory=dict)  # acknowledged id -> (key, seq)
    next_seq: dict[str, int] = field(default_factory=dict)  # key -> the first seq not yet acknowledged
    answers: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)


@dataclass
class KeyLoad:
    url: str
    grpc_addr: str
    topic: str
    ledger: KeyLedger
    gone: Callable[[], bool]
    rng: random.Random

    async def run(self) -> None:
        async with (
            httpx.AsyncClient(base_url=self.url, timeout=30) as http,
            grpc.aio.insecure_channel(self.grpc_addr) as channel,
        ):
            stub = pb_grpc.SidecarStub(channel)
            await asyncio.gather(*(self._key_worker(http, stub, f"key-{k}") for k in range(KEYS)))

    async def _key_worker(self, http: httpx.AsyncClient, stub: pb_grpc.SidecarStub, key: str) -> None:
        for _ in itertools.count():
            seq = self.ledger.next_seq.setdefault(key, 0)
            kind = self.rng.choice(KINDS)
            try:
                ids = await self._send(http, stub, key, seq, kind)
            except (httpx.HTTPError, grpc.aio.AioRpcError) as exc:
                if self.gone():
                    return
                self.ledger.answers[f"{kind} {type(exc).__name__}"] += 1
                await asyncio.sleep(0.05)  # the sidecar is stopping or starting: no event to await
                continue
            if ids is None:  # not 2xx: the same messages again
                await asyncio.sleep(0.05)
                continue
            for n, id_ in enumerate(ids):
                self.ledger.seq_of[id_] = (key, seq + n)
            self.ledger.next_seq[key] = seq + len(ids)
            self.ledger.answers[f"{kind} acked"] += len(ids)

    async def _send(
        self, http: httpx.AsyncClient, stub: pb_grpc.SidecarStub, key: str, seq: int, kind: str
    ) -> list[str] | None:
        """The ids of the messages from ``seq`` on, when all of them were answered 2xx; else None."""
        if kind == "grpc":
            msg = pb.Message(topic=self.topic, body=f"{key} {seq}", sharding_key=key)
            r = await stub.Send(pb.SendRequest(message=msg), timeout=30)
            return [r.id] if r.status in GRPC_ACKED else None
        if kind == "batch":
            docs = [
                {"topic": self.topic, "body": f"{key} {seq + n}", "shardingKey": key} for n in range(BATCH)
            ]
            r = await http.post("/v1/messages:batch", json={"messages": docs})
            if r.status_code not in (200, 202, 207):
                self._refused(kind, r)
                return None
            results = r.json()["results"]
            acked = [x.get("status") in ACKED_STATUSES for x in results]
            # Only a prefix of the batch counts as sent in order: an app resends from the first item
            # without a 2xx (and the items after it, which it cannot know were not stored before it).
            prefix = list(itertools.takewhile(bool, acked))
            return [x["id"] for x in results[: len(prefix)]] or None
        params = {"ack": "spool"} if kind == "spool" else {}
        doc = {"topic": self.topic, "body": f"{key} {seq}", "shardingKey": key}
        r = await http.post("/v1/messages", params=params, json=doc)
        if r.status_code not in (200, 202):
            self._refused(kind, r)
            return None
        return [r.json()["id"]]

    def _refused(self, kind: str, r: httpx.Response) -> None:
        self.ledger.answers[f"{kind} {r.status_code}"] += 1
        if r.status_code < 500 and r.status_code != 429:
            self.ledger.problems.append(f"{kind}: {r.status_code} {r.text[:200]}")


def out_of_order(stored: list[tuple[str, str]], seq_of: dict[str, tuple[str, int]]) -> list[str]:
    """Each acknowledged message whose first stored copy comes, in its queue, before the first copy of an
    earlier message of its key (ids the ledger does not know, sends never answered 2xx, are passed
    over). Per queue: a key whose queue changed with the route (a broker left or joined it, without an
    order configuration) has messages in two queues, whose relative order no reader can see."""
    seen: set[str] = set()
    last: dict[tuple[str, str], int] = {}  # (queue, key) -> the highest seq stored there so far
    wrong: list[str] = []
    for queue, id_ in stored:
        if id_ in seen or id_ not in seq_of:
            continue
        seen.add(id_)
        key, seq = seq_of[id_]
        top = last.get((queue, key), -1)
        if seq < top:
            wrong.append(f"{key} #{seq} stored after #{top} in {queue}")
        last[(queue, key)] = max(seq, top)
    return wrong


def queues_of_keys(stored: list[tuple[str, str]], seq_of: dict[str, tuple[str, int]]) -> dict[str, set[str]]:
    """key -> the queues its acknowledged messages were stored in."""
    out: dict[str, set[str]] = {}
    for queue, id_ in stored:
        if id_ in seq_of:
            out.setdefault(seq_of[id_][0], set()).add(queue)
    return out


def test_out_of_order_finds_a_key_overtaken() -> None:
    seq_of = {"a0": ("a", 0), "a1": ("a", 1), "b0": ("b", 0)}
    q = "broker-a/0"
    assert out_of_order([(q, "a0"), (q, "b0"), (q, "a1"), (q, "a0")], seq_of) == []  # later copies
    assert out_of_order([(q, "a1"), (q, "x"), (q, "a0"), (q, "b0")], seq_of) == [
        "a #0 stored after #1 in " + q
    ]
    assert out_of_order([("broker-b/1", "a1"), (q, "a0")], seq_of) == []  # two queues: no order between
    assert queues_of_keys([("broker-b/1", "a1"), (q, "a0"), (q, "b0")], seq_of) == {
        "a": {"broker-b/1", q},
        "b": {q},
    }


def test_key_order_soak_sigkill_and_sigterm_with_broker_outages(
    backend: Backend,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed = int(os.environ.get("ROCKSIDECAR_TEST_SOAK_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    topic = f"KeySoak{seed}"
    backend.prepare(topic)
    if isinstance(backend, RealBackend):
        # Without one a killed broker leaves the route (the name server drops it when its connection
        # closes) and its keys move to other queues, for a Java producer as for ours (README).
        backend.order(topic)
    config = tmp_path / "sidecar.yaml"
    config.write_text(FAST_LADDER)
    ledger = KeyLedger()
    outages: Counter[str] = Counter()
    for sig in [signal.SIGKILL, signal.SIGTERM] * CYCLES:
        grpc_addr = f"127.0.0.1:{free_port()}"
        settings = {"CONFIG": str(config), "SEND_TIMEOUT_MS": "300", "GRPC_ADDR": grpc_addr}
        with sidecar_process(backend.namesrv, tmp_path, ready_path="/healthz", **settings) as (url, proc):
            load = KeyLoad(url, grpc_addr, topic, ledger, lambda p=proc: p.poll() is not None, rng)
            outages[asyncio.run(cycle_load(load, proc, sig, backend.outage))] += 1
            proc.wait(60)
        if rng.random() < 0.5:
            backend.heal()
    backend.heal()
    with sidecar_process(backend.namesrv, tmp_path, CONFIG=str(config)) as (url, _):
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while (left := pending(url)) > 0:  # another process draining its store: polling is all we have
            assert time.monotonic() < deadline, f"still {left} pending after {DRAIN_TIMEOUT_S} s"
            time.sleep(0.5)
    stored = backend.stored_in_order(topic)
    lost = set(ledger.seq_of) - {uniq for _, uniq in stored}
    wrong = out_of_order(stored, ledger.seq_of)
    moved = {k: sorted(q) for k, q in queues_of_keys(stored, ledger.seq_of).items() if len(q) > 1}
    copies = Counter(uniq for _, uniq in stored)
    report = {
        "seed": seed,
        "outages": dict(outages),
        "acknowledged": len(ledger.seq_of),
        "lost": len(lost),
        "out_of_order": len(wrong),
        "keys_in_two_queues": len(moved),
        "later_copies": sum(c - 1 for c in copies.values()),
        "answers": dict(sorted(ledger.answers.items())),
        "problems": ledger.problems[:10],
    }
    with capsys.disabled():  # the report in make soak's output, as the soak's
        print("\nKEY SOAK " + json.dumps(report, indent=1))
    assert not lost, f"{len(lost)} acknowledged ids never stored: {sorted(lost)[:10]}"
    assert not wrong, f"{len(wrong)} messages out of their key's order: {wrong[:10]}"
    if isinstance(backend, RealBackend):  # with the order configuration a key keeps its queue
        assert not moved, f"keys stored in more than one queue: {dict(list(moved.items())[:5])}"
    assert not ledger.problems, ledger.problems[:10]
    assert len(ledger.seq_of) > 200 * CYCLES  # the load really ran
