"""Child process of test_crash: spools messages into a RocksDB retry store and replays them into
devbroker through the producer. The parent kills it with SIGKILL at arbitrary points and restarts it.

    python -m tests.retry.crash_child STORE_DIR NAMESRV spool N   spool N messages (due now), replay
    python -m tests.retry.crash_child STORE_DIR NAMESRV keyed N   the same, with KEYS sharding keys: each
                                                                  key's messages spooled one after another
    python -m tests.retry.crash_child STORE_DIR NAMESRV drain     replay until the store is empty

stdout: ``acked <id>`` once a spool is synced (when the sidecar would answer 2xx), ``sent <id>`` once
devbroker stored a replayed message, ``failed <id>`` when a send failed, ``drained`` at the end.
"""

from __future__ import annotations

import asyncio
import sys

from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.replay import ReplayLoop
from rocksidecar.retry.store import RetryStore
from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient
from rocksidecar.rmq.producer import Producer, ProducerConfig

TOPIC = "CrashTest"
WORKERS = 16
KEYS = 20  # keyed mode: message i has the sharding key f"k{i % KEYS}", spooled in the order of i


def key_of(id_: str) -> str:
    return f"k{int(id_[3:]) % KEYS}"


POLICY = RetryPolicy(ladder_s=(0.05,), max_retries=1000)  # short rungs keep the test fast


async def main(store_dir: str, namesrv: str, mode: str, count: int) -> None:
    client = RemotingClient()
    producer = Producer(
        NameServerClient(client, namesrv),
        BrokerApi(client, producer_group="crash"),
        ProducerConfig(group="crash"),
    )
    await producer.start()

    async def deliver(record: RetryRecord) -> None:
        message = Message(
            record.topic, record.body, record.tags, record.keys, record.properties, id=record.id
        )
        try:
            await producer.send(message, sharding_key=record.sharding_key)
        except Exception:
            print("failed", record.id, flush=True)  # the loop reschedules it
            raise
        print("sent", record.id, flush=True)

    store = RetryStore.open(store_dir)
    loop = ReplayLoop(store, deliver, lambda _type: POLICY, workers=WORKERS)
    await loop.start()
    if mode == "spool":

        async def spool(i: int) -> None:
            id_ = f"MSG{i:06d}"
            await store.spool(RetryRecord(id=id_, topic=TOPIC, body=b"x" * 256))
            print("acked", id_, flush=True)

        await asyncio.gather(*(spool(i) for i in range(count)))
    elif mode == "keyed":

        async def spool_key(k: int) -> None:
            for i in range(k, count, KEYS):  # a key's messages one after another, as a careful app sends
                id_ = f"MSG{i:06d}"
                await store.spool(RetryRecord(id=id_, topic=TOPIC, body=b"x" * 256, sharding_key=key_of(id_)))
                print("acked", id_, flush=True)

        await asyncio.gather(*(spool_key(k) for k in range(KEYS)))
    while True:  # until the parent kills us, or (drain) the store is empty
        await loop.wait_idle()
        if mode == "drain" and store.stats().pending == 0:
            break
        await asyncio.sleep(0.01)  # idle but not empty: a key waits for its (short) rung
    await loop.close()
    await store.close()
    await producer.close()
    await client.close()
    print("drained", flush=True)


if __name__ == "__main__":
    directory, namesrv_addr, mode_arg, *rest = sys.argv[1:]
    asyncio.run(main(directory, namesrv_addr, mode_arg, int(rest[0]) if rest else 0))
