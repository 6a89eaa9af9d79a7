"""Child process of test_crash: schedules delayed messages in a RocksDB delay store and publishes them
into devbroker through the producer when due. The parent kills it with SIGKILL and restarts it.

    python -m tests.delay.crash_child STORE_DIR NAMESRV schedule N SPREAD_MS   schedule N messages due
                                                                           over the next SPREAD_MS, publish
    python -m tests.delay.crash_child STORE_DIR NAMESRV drain                  publish until none is pending

stdout: ``acked <id>`` once a schedule is synced (when the sidecar would answer 2xx), ``sent <id>`` once
devbroker stored a due message, ``failed <id>`` when its publish failed, ``drained`` at the end.
"""

from __future__ import annotations

import asyncio
import sys

from rocksidecar.delay import COLUMN_FAMILIES, DelayedMessage, DelayScheduler, DelayStore
from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.rocks import RocksKV

TOPIC = "DelayCrashTest"


async def main(store_dir: str, namesrv: str, mode: str, count: int, spread_ms: int) -> None:
    client = RemotingClient()
    producer = Producer(
        NameServerClient(client, namesrv),
        BrokerApi(client, producer_group="delay-crash"),
        ProducerConfig(group="delay-crash"),
    )
    await producer.start()
    published = asyncio.Event()

    async def publish(msgs: list[DelayedMessage]) -> list[object]:
        batch = [Message(m.topic, m.body, m.tags, m.keys, m.properties, id=m.id) for m in msgs]
        results: list[object] = list(await producer.send_batch(batch, [m.sharding_key for m in msgs]))
        for msg, result in zip(msgs, results, strict=True):
            print("failed" if isinstance(result, Exception) else "sent", msg.id, flush=True)
        published.set()
        return results

    kv = RocksKV.open(store_dir, COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    scheduler = DelayScheduler(store, publish, batch_max=100, retry_s=0.05)
    await scheduler.start()
    if mode == "schedule":
        start = store.now_ms()

        async def schedule(i: int) -> None:
            id_ = f"DLY{i:06d}"
            due = start + 200 + i * spread_ms // count
            await store.schedule(DelayedMessage(id=id_, topic=TOPIC, body=b"x" * 256, due_ms=due))
            print("acked", id_, flush=True)

        await asyncio.gather(*(schedule(i) for i in range(count)))
    while True:  # until the parent kills us, or (drain) nothing is pending
        published.clear()
        await scheduler.wait_idle()
        if mode == "drain" and store.stats().pending == 0:
            break
        await published.wait()  # idle with messages pending: they are not due yet
    await scheduler.close()
    await store.close()
    await writer.close()
    kv.close()
    await producer.close()
    await client.close()
    print("drained", flush=True)


if __name__ == "__main__":
    directory, namesrv_addr, mode_arg, *rest = sys.argv[1:]
    n, spread = (int(rest[0]), int(rest[1])) if rest else (0, 0)
    asyncio.run(main(directory, namesrv_addr, mode_arg, n, spread))
