"""Push consumer benchmark on devbroker (its own process): delivery rate to a no-op listener, and how
long a group's queues go without a consumer when a member leaves (issue 13 groundwork).

    .venv/bin/python -m bench.consume                 # about a minute
    .venv/bin/python -m bench.consume --messages 20000

Handover: two members split 8 queues; one leaves, and the clock runs from the moment it starts leaving
until the other owns all 8 queues again. "close" is an orderly close (persist offsets, UNREGISTER_CLIENT,
the broker notifies the group at once); "crash" drops the leaver's connections without a word, as a
SIGKILL does (the broker sees the connection close and notifies). No Java anchor here: the issue's
comparison with RocketMQ's benchmark Consumer needs a real broker (not run in this session).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

import uvloop

from bench.common import devbroker_process, environment
from rmq import (
    BrokerApi,
    Message,
    MessageExt,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    new_uniq_id,
)
from rmq.consumer import ConsumeFrom, ConsumerConfig, ConsumeStatus, PushConsumer

TOPIC = "BenchConsume"


async def fill(namesrv: str, total: int, size: int) -> int:
    """Create the topic with 4 queues on every broker and fill it; returns the number of queues."""
    client = RemotingClient()
    api = BrokerApi(client)
    ns = NameServerClient(client, namesrv)
    template = await ns.get_route("TBW102")
    for b in template.broker_datas:
        await api.create_topic(b.master_addr or "", TOPIC, read_queue_nums=4, write_queue_nums=4)
    route = await ns.get_route(TOPIC)
    queues = route.publish_queues(TOPIC)
    body = b"b" * size
    per_batch = 100
    sem = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        mq = queues[i % len(queues)]
        msgs = [Message(TOPIC, body) for _ in range(per_batch)]
        keys = [new_uniq_id() for _ in msgs]
        async with sem:
            await api.send_batch(route.master_addr(mq.broker_name) or "", mq, msgs, keys, 10.0)

    await asyncio.gather(*(one(i) for i in range(total // per_batch)))
    await client.close()
    return len(queues)


def _config(group: str, name: str, batch: int) -> ConsumerConfig:
    return ConsumerConfig(
        group, instance_name=name, consume_from=ConsumeFrom.FIRST_OFFSET, consume_batch_size=batch
    )


async def rate(namesrv: str, total: int, batch: int) -> float:
    done = asyncio.Event()
    count = 0

    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        nonlocal count
        count += len(msgs)
        if count >= total:
            done.set()
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer(_config(f"bench_rate_{batch}_{time.time_ns()}", "r", batch), namesrv, listener)
    consumer.subscribe(TOPIC)
    start = time.perf_counter()
    await consumer.start()
    await done.wait()
    took = time.perf_counter() - start
    await consumer.close()
    return count / took


async def handover(namesrv: str, crash: bool, queues: int) -> float:
    async def listener(msgs: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
        return ConsumeStatus.SUCCESS

    group = f"bench_handover_{time.time_ns()}"
    a = PushConsumer(_config(group, "a", 1), namesrv, listener)
    b = PushConsumer(_config(group, "b", 1), namesrv, listener)
    for c in (a, b):
        c.subscribe(TOPIC)
        await c.start()

    def mine(c: PushConsumer) -> int:
        return sum(1 for mq in c.queues if mq.topic == TOPIC)

    while mine(a) != queues // 2 or mine(b) != queues // 2:
        await a.stats.reach("rebalances_done", a.stats["rebalances_done"] + 1)
    start = time.perf_counter()
    if crash:
        for conn in list(b._client._conns.values()):  # what a SIGKILL looks like from the broker
            conn.abort()
    else:
        await b.close()
    while mine(a) != queues:
        await a.stats.reach("rebalances_done", a.stats["rebalances_done"] + 1)
    took = time.perf_counter() - start
    await a.close()
    if crash:
        b._own_client = False  # its connections are gone already; just stop its tasks
        await b.close()
    return took


async def main_async(namesrv: str, total: int, size: int, rounds: int) -> None:
    t0 = time.perf_counter()
    queues = await fill(namesrv, total, size)
    print(f"filled {total:,} messages of {size} B into {queues} queues in {time.perf_counter() - t0:.1f} s")
    for batch in (1, 32):
        per_s = await rate(namesrv, total, batch)
        print(f"delivery to a no-op listener, consume_batch_size {batch}: {per_s:,.0f} msg/s")
    for crash in (False, True):
        times = [await handover(namesrv, crash, queues) for _ in range(rounds)]
        label = "crash (connections dropped)" if crash else "close (persist + unregister)"
        print(f"queues without a consumer after a {label}: " + ", ".join(f"{t * 1000:.0f} ms" for t in times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"# consume benchmark: {environment()}, uvloop, devbroker in its own process")
    with devbroker_process() as dev:
        uvloop.run(main_async(dev.namesrv, args.messages, args.size, args.rounds))


if __name__ == "__main__":
    main()
