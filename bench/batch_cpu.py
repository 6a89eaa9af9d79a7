"""CPU per message of the batch route's own work, in one process (issue 32): ``POST /v1/messages:batch``
from its body bytes to its answer bytes, through the same route function, operations, sidecar, producer
and frame encoding the server runs, against a broker that answers every SEND_BATCH_MESSAGE at once
(no network, no HTTP connection, no broker). End to end, CPU per message on the shared machine moves
with the rate each run gets; this part does not, so two versions of the path can be compared here.

Process CPU time (user + system) per message, the median of ``--rounds``; ``--profile FILE`` runs one
more round under cProfile and prints where it went. On a machine too busy for CPU time to compare,
``--instructions`` counts instead the instructions a message costs (valgrind's cachegrind, two runs of
different lengths subtracted, so start-up and imports cancel out; about a minute): the load does not move
that count. Run it in each checkout (each tree's own .venv; the file copied into an older one that lacks
it):

    .venv/bin/python -m bench.batch_cpu [--batch 100] [--requests 2000] [--rounds 7]
    .venv/bin/python -m bench.batch_cpu --instructions        # needs valgrind
    .venv/bin/python -m bench.batch_cpu --single [--instructions]   # POST /v1/messages, one a request
    .venv/bin/python -m bench.batch_cpu --single --trace on --instructions

``--trace``: ``off`` gives every request a sampled W3C traceparent (carried, tracing off); ``on`` the same
with OpenTelemetry spans on as the sidecar runs them (app.assembly's TracedSender around the producer, the
loop's batching processor, every batch encoded as OTLP and dropped: bench.tracing_cpu's): the route's own
cost of a sampled request's spans (issue 31), which bench.tracing measures in place.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import time
from typing import cast

import orjson
from opentelemetry.sdk.trace import TracerProvider

from bench.tracing_cpu import _LoopProcessor
from rocksidecar.app.api.http import Api, Readiness, send_many, send_one
from rocksidecar.app.api.operations import EdgeDeps, Operations
from rocksidecar.app.metrics import Metrics
from rocksidecar.app.request import HTTP_FIELDS, Limits
from rocksidecar.app.sidecar import Sidecar
from rocksidecar.app.tracing import spans
from rocksidecar.app.tracing.context import TraceContext
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.producer import Producer
from rocksidecar.rmq.protocol.frame import RemotingCommand, encode
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData
from rocksidecar.rmq.sender import Sender
from rocksidecar.storage.clock import wall_ms

TOPIC = "BenchBatchCpu"
BODY = "x" * 256  # as bench.compare posts
PATH = "/v1/messages:batch"
SINGLE_PATH = "/v1/messages"


class InstantBroker:
    """An Invoker whose brokers store every batch at once: the route of TOPIC (two brokers of four
    queues), heart beats, and SEND_BATCH_MESSAGE answered with one offset id per message. The request
    frame is encoded, as a connection would."""

    def __init__(self) -> None:
        route = TopicRouteData(
            tuple(QueueData(b, 4, 4, 6) for b in ("broker-a", "broker-b")),
            tuple(BrokerData("c", b, {0: f"{b}:10911"}) for b in ("broker-a", "broker-b")),
        )
        self._route = route.to_json()
        self._offsets: dict[str, int] = {}
        self._ids: dict[int, str] = {}

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        encode(cmd)
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            return cmd.response(ResponseCode.SUCCESS, body=self._route)
        if cmd.code == RequestCode.SEND_MESSAGE_V2:  # --single: one message, one offset id
            n = 1
        elif cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            n = cmd.body.count(b"UNIQ_KEY")  # one per record
        else:
            return cmd.response(ResponseCode.SUCCESS)
        ids = self._ids.get(n)
        if ids is None:
            ids = self._ids[n] = ",".join(f"7F00000100002A9F{i:016X}" for i in range(n))
        key = addr + cmd.ext_fields["e"]
        offset = self._offsets.get(key, 0)
        self._offsets[key] = offset + n
        fields = {"msgId": ids, "queueId": cmd.ext_fields["e"], "queueOffset": str(offset)}
        return cmd.response(ResponseCode.SUCCESS, ext_fields=fields)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        encode(cmd)


class NoSpool:
    """The retry store: never reached while every message is SENT (the run checks it). Its lanes are
    asked as the sidecar's are (app.sidecar): none is open, as with nothing spooled."""

    lanes_open = 0

    def lane_head_due(self, topic: str, sharding_key: str) -> int | None:
        raise AssertionError("a lane was asked about while none is open")

    async def spool(self, record: RetryRecord, due_ms: int | None = None) -> object:
        raise AssertionError("a message was spooled: the benchmark measures the all-SENT path")

    async def spool_many(self, records: object, due_ms: int | None = None) -> object:
        raise AssertionError("messages were spooled: the benchmark measures the all-SENT path")


TRACE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")  # sampled


def build_api(spans_on: bool = False) -> Api:
    invoker = InstantBroker()
    producer = Producer(NameServerClient(invoker, "ns:9876"), BrokerApi(invoker), client_id="bench@1")
    # spans on: the send wrapped as app.assembly wraps it
    sender: Sender = spans.TracedSender(producer, background=False) if spans_on else producer
    spool = NoSpool()
    sidecar = Sidecar(sender, spool, policy_for=lambda _type: RetryPolicy(), lanes=spool)
    limits = Limits(max_body_bytes=4 * 1024 * 1024, max_delay_ms=40 * 24 * 3600 * 1000)
    deps = EdgeDeps(sidecar, limits, 1000, Metrics(), None, wall_ms)
    return Api(Operations.of(deps, HTTP_FIELDS), cast(Readiness, None))  # the route never reads it


async def _round(api: Api, body: bytes, requests: int, batch: int, trace: TraceContext | None) -> float:
    start = time.process_time()
    if batch:
        for _ in range(requests):
            await send_many(api, PATH, body, None, None, trace)
    else:
        for _ in range(requests):
            await send_one(api, SINGLE_PATH, body, None, None, trace)
    return time.process_time() - start


async def _check(api: Api, body: bytes, batch: int, trace: TraceContext | None) -> None:
    if not batch:
        status, payload, _, _ = await send_one(api, SINGLE_PATH, body, None, None, trace)
        if status != 200 or orjson.loads(payload)["status"] != "SENT":
            raise SystemExit(f"the route answered {status} {payload[:300]!r}, not SENT")
        return
    status, payload, _, _ = await send_many(api, PATH, body, None, None, trace)
    doc = orjson.loads(payload)
    if status != 200 or doc["sent"] != batch:
        raise SystemExit(f"the route answered {status} {payload[:300]!r}, not {batch} SENT")


async def run(batch: int, requests: int, rounds: int, profile: str | None, trace: str = "none") -> None:
    """``batch`` 0: single sends (``POST /v1/messages``), one message a request; ``trace`` as --trace."""
    context = None if trace == "none" else TRACE
    processor = None
    if trace == "on":
        provider = TracerProvider(shutdown_on_exit=False)
        processor = _LoopProcessor(requests * max(batch, 1) * (rounds + 2), encode=True)
        provider.add_span_processor(processor)
        spans.configure(provider)
    api = build_api(spans_on=trace == "on")
    if batch:
        body = json.dumps({"messages": [{"topic": TOPIC, "body": BODY}] * batch}).encode()
    else:
        body = json.dumps({"topic": TOPIC, "body": BODY}).encode()
    await _check(api, body, batch, context)  # and warm: the route is cached from here on
    per_message = []
    for _ in range(rounds):
        spent = await _round(api, body, requests, batch, context)
        if processor is not None:  # the export of this round's spans belongs to its figure
            started = time.process_time()
            await processor._drain()
            spent += time.process_time() - started
        per_message.append(spent * 1e6 / (requests * max(batch, 1)))
    print(
        f"{f'batch of {batch}' if batch else 'single sends'}, {requests} requests a round: "
        f"{statistics.median(per_message):.2f} us CPU per message (median of {rounds}; "
        f"rounds {' '.join(f'{x:.2f}' for x in per_message)})"
    )
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        await _round(api, body, requests, batch, context)
        prof.disable()
        prof.dump_stats(profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)


def instructions(batch: int, low: int = 10, high: int = 110, trace: str = "none") -> float:
    """Instructions per message: this benchmark under cachegrind at ``high`` and ``low`` requests, the
    difference over the messages between them."""

    def run(requests: int) -> int:
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        cmd += [sys.executable, "-m", "bench.batch_cpu", "--batch", str(batch)]
        cmd += ["--requests", str(requests), "--rounds", "1", "--trace", trace]
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same hashes, the same work, run after run
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stderr
        found = re.search(r"I\s+refs:\s+([\d,]+)", out)
        if found is None:
            raise SystemExit(f"cachegrind printed no count:\n{out[-2000:]}")
        return int(found.group(1).replace(",", ""))

    return (run(high) - run(low)) / ((high - low) * max(batch, 1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=100, help="messages per request")
    parser.add_argument(
        "--single", action="store_true", help="POST /v1/messages instead: one message a request (--batch 0)"
    )
    parser.add_argument("--requests", type=int, default=2000, help="per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", help="cProfile one more round into FILE and print the top")
    parser.add_argument("--instructions", action="store_true", help="count instructions per message instead")
    parser.add_argument(
        "--trace", choices=("none", "off", "on"), default="none",
        help="off: a sampled traceparent on every request; on: that, and OpenTelemetry spans on",
    )  # fmt: skip
    args = parser.parse_args()
    if args.single:
        args.batch = 0
        args.requests = max(args.requests, 100)
    if args.instructions:
        what = f"batch of {args.batch}" if args.batch else "single sends"
        low, high = (10, 110) if args.batch else (1000, 11000)
        count = instructions(args.batch, low, high, args.trace)
        print(f"{what}, trace {args.trace}: {count:,.0f} instructions per message")
        return
    asyncio.run(run(args.batch, args.requests, args.rounds, args.profile, args.trace))


if __name__ == "__main__":
    main()
