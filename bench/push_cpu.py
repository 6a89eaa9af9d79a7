"""CPU per message of a subscription's listener alone, against the floor's listener (issue 32).

    .venv/bin/python -m bench.push_cpu                    # about 20 s
    .venv/bin/python -m bench.push_cpu --messages 50000 --rounds 5

bench.consume measures the whole path (pull, decode, the consume pool, the POST) on a broker; on a busy
machine its figures move by tens of per cent between runs. This isolates what differs between the
sidecar's one-POST-per-message push and its floor: the listener. The same pre-decoded messages (a pulled
message's system properties: UNIQ_KEY, WAIT, a tag) go, one per call, through ``concurrency`` tasks
to either HttpPush (CloudEvents headers, HttpClient, the delivery hook the sidecar's metrics use) or
bench.consume's Relay (the body and nothing else), both POSTing to the same no-op app in its own
process. Rounds alternate which goes first; printed: CPU of this process (user + system) per message,
each round and the median, and the push's CPU over the floor's.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

import uvloop

from bench.common import bench_parser, environment, rotated
from bench.consume import Relay, fast_app
from rocksidecar.app.http_client import HttpClient
from rocksidecar.app.metrics import Metrics
from rocksidecar.app.subscriptions.push import HttpPush
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.rmq import MessageExt, MessageQueue, new_uniq_id
from rocksidecar.rmq.consumer import ConsumeStatus

Listener = Callable[[Sequence[MessageExt], MessageQueue], Awaitable[ConsumeStatus]]
MQ = MessageQueue("BenchPushCpu", "broker-a", 0)


def messages(total: int, size: int) -> list[MessageExt]:
    body = b"b" * size
    now = int(time.time() * 1000)
    return [
        MessageExt(
            MQ.topic,
            body,
            0,
            i,
            i * 300,
            0,
            0,
            now,
            "127.0.0.1:50000",
            now,
            "127.0.0.1:10911",
            0,
            0,
            0,
            300,
            {"UNIQ_KEY": new_uniq_id(), "WAIT": "true", "TAGS": "created"},
            f"7F00000100002A9F{i:016X}",
        )
        for i in range(total)
    ]


async def drive(listener: Listener, msgs: list[MessageExt], concurrency: int) -> float:
    """CPU microseconds of this process per message, ``concurrency`` listener calls at a time."""
    it = iter(msgs)

    async def worker() -> None:
        for m in it:
            if await listener([m], MQ) is not ConsumeStatus.SUCCESS:
                raise RuntimeError("the app refused a message")

    cpu = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - cpu) * 1e6 / len(msgs)


async def main_async(total: int, size: int, rounds: int, concurrency: int) -> None:
    msgs = messages(total, size)
    metrics = Metrics()
    push_cpu: list[float] = []
    floor_cpu: list[float] = []
    async with fast_app() as port:
        spec = SubscriptionSpec("bench", MQ.topic, "bench_push_cpu", f"http://127.0.0.1:{port}/")
        client = HttpClient()
        push = HttpPush(spec, client, on_delivery=metrics.observe_delivery)
        relay = Relay(port)
        await drive(push, msgs[:500], concurrency)  # connections and first-call costs out of the way
        await drive(relay, msgs[:500], concurrency)
        for r in range(rounds):
            runs: list[tuple[list[float], Listener]] = [(push_cpu, push), (floor_cpu, relay)]
            for into, listener in rotated(runs, r):
                into.append(await drive(listener, msgs, concurrency))
        await client.close()
        relay.close()
    for label, cpus in (("sidecar HttpPush", push_cpu), ("floor (Relay)", floor_cpu)):
        each = " / ".join(f"{x:.1f}" for x in cpus)
        print(f"{label}: CPU {statistics.median(cpus):.1f} us/msg (rounds {each})")
    ratios = [p / f for p, f in zip(push_cpu, floor_cpu, strict=True)]
    print(
        f"push / floor CPU per message: {statistics.median(ratios):.2f}x (rounds "
        + ", ".join(f"{x:.2f}" for x in ratios)
        + ")"
    )


def main() -> None:
    args = bench_parser(__doc__, messages=20_000, size=256, rounds=3, concurrency=20).parse_args()
    print(f"# listener CPU benchmark: {environment()}, uvloop, app in its own process")
    uvloop.run(main_async(args.messages, args.size, args.rounds, args.concurrency))


if __name__ == "__main__":
    main()
