"""Routing costs (issue 3): per-send queue selection overhead in µs, and send throughput with one of two
brokers failing every send compared with both healthy, measured in the same run against devbroker (its
own process). With fault tolerance the failing broker costs one failed attempt, then it is isolated;
without it (the Java default) every send that lands on it pays a failure and a retry.

    .venv/bin/python -m bench.routing
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time

import uvloop

from bench.common import (
    DevbrokerProcess,
    Row,
    bench_parser,
    bench_producer,
    devbroker_process,
    environment,
    print_rows,
)
from rocksidecar.rmq import Message
from rocksidecar.rmq.producer import Producer, RoundRobin
from rocksidecar.rmq.producer.fault import LatencyFaultTolerance
from rocksidecar.rmq.producer.publish_info import SendIndex, TopicPublishInfo
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData


def selection_overhead(n: int) -> list[Row]:
    route = TopicRouteData(
        (QueueData("broker-a", 4, 4, 6), QueueData("broker-b", 4, 4, 6)),
        (BrokerData("c", "broker-a", {0: "a:1"}), BrokerData("c", "broker-b", {0: "b:1"})),
    )
    info = TopicPublishInfo.build("T", route, SendIndex(0))
    rows = []
    cases = [
        ("round robin, no fault tolerance", None, ()),
        ("round robin + fault tolerance, healthy", "ft", ()),
        ("fault tolerance, broker-a backing off", "ft", ("broker-a",)),
        ("fault tolerance, both backing off (pickOneAtLeast)", "ft", ("broker-a", "broker-b")),
    ]
    base = None
    for name, ft, slow in cases:
        fault = LatencyFaultTolerance(rng=random.Random(1)) if ft else None
        for broker in slow:
            assert fault is not None
            fault.update(broker, 0.6, isolation=False)
        selector = RoundRobin(fault)
        started = time.perf_counter()
        for _ in range(n):
            selector.select(info, None)
        us = (time.perf_counter() - started) / n * 1e6
        base = base or us
        rows.append(Row(f"select: {name}", us, "µs", base))
    return rows


async def _stream(producer: Producer, topic: str, messages: int, concurrency: int) -> tuple[float, int]:
    """Send ``messages`` with ``concurrency`` in flight; (msg/s, failures)."""
    body = b"x" * 256
    for _ in range(100):  # warm up: routes, connections, topic auto-creation
        await producer.send(Message(topic, body))
    sem = asyncio.Semaphore(concurrency)
    failures = 0

    async def one() -> None:
        nonlocal failures
        async with sem:
            try:
                await producer.send(Message(topic, body))
            except Exception:
                failures += 1

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(messages)))
    return messages / (time.perf_counter() - started), failures


# (label, producer settings, broker-a failing). "pinned" sends everything to one healthy broker: in this
# closed loop (a fixed window of requests in flight) one broker connection is slower than two, because
# client and broker then take turns; it is the ceiling the failing-broker rows should be read against.
CASES: tuple[tuple[str, dict[str, object], bool], ...] = (
    ("both healthy, round robin", {}, False),
    (
        "healthy, all pinned to broker-b (one-broker ceiling)",
        {"selector": "environment", "environment_index": 5},
        False,
    ),
    ("broker-a failing every send", {}, True),
    ("broker-a failing, fault tolerance off", {"fault_tolerance": False}, True),
)


async def _case(
    dev: DevbrokerProcess, settings: dict[str, object], failing: bool, messages: int, concurrency: int
) -> tuple[float, int]:
    if failing:
        dev.faults("broker-a", fail_all=True, fail_code=1)
    client, producer = await bench_producer(dev.namesrv, **settings)  # type: ignore[arg-type]
    try:
        return await _stream(producer, "RsRouting", messages, concurrency)
    finally:
        await producer.close()
        await client.close()


def throughput(messages: int, concurrency: int, rounds: int) -> list[Row]:
    """Each case gets a fresh devbroker (a log grown by earlier cases would slow later ones); rounds are
    interleaved and the median is reported, as this machine is shared."""
    rates: dict[str, list[float]] = {label: [] for label, _, _ in CASES}
    failed: dict[str, int] = dict.fromkeys(rates, 0)
    for _ in range(rounds):
        for label, settings, failing in CASES:
            with devbroker_process() as dev:
                rate, failures = uvloop.run(_case(dev, settings, failing, messages, concurrency))
            rates[label].append(rate)
            failed[label] += failures
    pinned = statistics.median(rates[CASES[1][0]])
    return [
        Row(
            f"{concurrency} in flight: {label} ({failed[label]} failed)",
            statistics.median(rates[label]),
            "msg/s",
            pinned,
        )
        for label, _, _ in CASES
    ]


def main() -> None:
    parser = bench_parser(__doc__, selections=1_000_000, messages=40_000, concurrency=64, rounds=3)
    args = parser.parse_args()
    print(f"routing; {environment()}")
    print_rows("queue selection per send (ratio to plain round robin)", selection_overhead(args.selections))
    rows = throughput(args.messages, args.concurrency, args.rounds)
    print_rows("throughput against devbroker, median of the rounds (ratio to the one-broker ceiling)", rows)


if __name__ == "__main__":
    main()
