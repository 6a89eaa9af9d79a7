"""Mixed client load for the soak suite, with a ledger of every id the sidecar answered 2xx.

HTTP: single sends (ack=broker), ack=spool, batches of 5, delayed sends, sends under an Idempotency-Key
(each sent twice: the repeat must answer the same id); gRPC: Send and SendBatch. A worker stops when
the sidecar is gone (its connection refused after the kill).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc

ACKED_STATUSES = ("SENT", "SPOOLED", "SCHEDULED")
GRPC_ACKED = (pb.SENT, pb.SPOOLED, pb.SCHEDULED)
HTTP_KINDS = ("single", "spool", "batch", "delayed", "idempotent")
GRPC_KINDS = ("grpc-send", "grpc-batch")
BATCH = 5


@dataclass
class Ledger:
    acked: set[str] = field(default_factory=set)  # every id answered 2xx, over all cycles
    answers: Counter[str] = field(default_factory=Counter)  # "kind status" -> count
    problems: list[str] = field(default_factory=list)  # broken promises seen by the client itself

    def ack(self, kind: str, ids: list[str]) -> None:
        self.acked.update(ids)
        self.answers[f"{kind} acked"] += len(ids)


@dataclass
class Load:
    url: str
    grpc_addr: str
    topic: str
    ledger: Ledger
    gone: Callable[[], bool]  # the sidecar process has exited
    run_id: str
    rng: random.Random
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def body(self, kind: str) -> str:
        return f"{self.run_id} {kind} {next(self.counter)}"

    async def run(self, http_workers: int = 6, grpc_workers: int = 2) -> None:
        async with (
            httpx.AsyncClient(base_url=self.url, timeout=30) as http,
            grpc.aio.insecure_channel(self.grpc_addr) as channel,
        ):
            stub = pb_grpc.SidecarStub(channel)
            await asyncio.gather(
                *(self._http_worker(http, i) for i in range(http_workers)),
                *(self._grpc_worker(stub, i) for i in range(grpc_workers)),
            )

    async def _http_worker(self, http: httpx.AsyncClient, worker: int) -> None:
        for n in itertools.count(worker):
            kind = HTTP_KINDS[n % len(HTTP_KINDS)]
            try:
                await self._http_one(http, kind)
            except httpx.HTTPError:
                if self.gone():
                    return
                self.ledger.answers[f"{kind} transport-error"] += 1
                await asyncio.sleep(0.05)  # the sidecar is shutting down or starting: no event to await

    async def _http_one(self, http: httpx.AsyncClient, kind: str) -> None:
        headers: dict[str, str] = {}
        params: dict[str, str] = {}
        path = "/v1/messages"
        doc: dict[str, Any] = {"topic": self.topic, "body": self.body(kind)}
        if kind == "spool":
            params["ack"] = "spool"
        elif kind == "batch":
            path = "/v1/messages:batch"
            doc = {"messages": [{"topic": self.topic, "body": self.body(kind)} for _ in range(BATCH)]}
        elif kind == "delayed":
            doc["delayMs"] = self.rng.randint(100, 3000)
        elif kind == "idempotent":
            headers["Idempotency-Key"] = f"{self.run_id}-{next(self.counter)}"
        r = await http.post(path, params=params, json=doc, headers=headers)
        self._http_answer(kind, r)
        if kind == "idempotent" and r.status_code in (200, 202):
            again = await http.post(path, params=params, json=doc, headers=headers)
            self._http_answer(kind, again)
            if again.status_code in (200, 202) and again.json()["id"] != r.json()["id"]:
                self.ledger.problems.append(f"Idempotency-Key {headers} answered two ids")

    def _http_answer(self, kind: str, r: httpx.Response) -> None:
        if r.status_code not in (200, 202):
            self.ledger.answers[f"{kind} {r.status_code}"] += 1
            if r.status_code < 500 and r.status_code != 429:
                self.ledger.problems.append(f"{kind}: {r.status_code} {r.text[:200]}")
            return
        doc = r.json()
        items = doc.get("results", [doc])
        self.ledger.ack(kind, [x["id"] for x in items if x.get("status") in ACKED_STATUSES])

    async def _grpc_worker(self, stub: pb_grpc.SidecarStub, worker: int) -> None:
        for n in itertools.count(worker):
            kind = GRPC_KINDS[n % len(GRPC_KINDS)]
            try:
                if kind == "grpc-send":
                    msg = pb.Message(topic=self.topic, body=self.body(kind))
                    r = await stub.Send(pb.SendRequest(message=msg), timeout=30)
                    if r.status in GRPC_ACKED:
                        self.ledger.ack(kind, [r.id])
                else:
                    msgs = [pb.Message(topic=self.topic, body=self.body(kind)) for _ in range(BATCH)]
                    b = await stub.SendBatch(pb.SendBatchRequest(messages=msgs), timeout=30)
                    ids = [
                        i.result.id
                        for i in b.results
                        if i.HasField("result") and i.result.status in GRPC_ACKED
                    ]
                    self.ledger.ack(kind, ids)
            except grpc.aio.AioRpcError as exc:
                if self.gone():
                    return
                self.ledger.answers[f"{kind} {exc.code().name}"] += 1
                if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL):
                    self.ledger.problems.append(f"{kind}: {exc.code().name} {exc.details()}")
                await asyncio.sleep(0.05)  # see _http_worker
