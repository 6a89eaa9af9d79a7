"""Child process of test_crash: spools messages into a RocksDB retry store and replays them into a
receiver over TCP (one line per delivery: the id out, ``ok`` or ``retry`` back). The parent kills it
with SIGKILL at an arbitrary point and starts it again.

    python -m tests.retry.crash_child STORE_DIR PORT spool N   spool N messages (due now), replay
    python -m tests.retry.crash_child STORE_DIR PORT drain     replay until the store is empty
"""

from __future__ import annotations

import asyncio
import sys

from retry.policy import RetryPolicy
from retry.record import RetryRecord
from retry.replay import ReplayLoop
from retry.store import RetryStore

WORKERS = 16
POLICY = RetryPolicy(ladder_s=(0.05,), max_retries=1000)  # short rungs keep the test fast


class Rejected(Exception):
    retriable = True


class Receiver:
    def __init__(self, port: int) -> None:
        self._port = port
        self._pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def connect(self) -> None:
        for _ in range(WORKERS):
            self._pool.put_nowait(await asyncio.open_connection("127.0.0.1", self._port))

    async def deliver(self, record: RetryRecord) -> None:
        reader, writer = await self._pool.get()
        try:
            writer.write(record.id.encode() + b"\n")
            answer = await reader.readline()
        finally:
            self._pool.put_nowait((reader, writer))
        if answer != b"ok\n":
            raise Rejected(answer.decode().strip() or "connection closed")


async def main(store_dir: str, port: int, mode: str, count: int) -> None:
    store = RetryStore.open(store_dir)
    receiver = Receiver(port)
    await receiver.connect()
    loop = ReplayLoop(store, receiver.deliver, lambda _type: POLICY, workers=WORKERS)
    await loop.start()
    if mode == "spool":

        async def spool(i: int) -> None:
            id_ = f"MSG{i:06d}"
            await store.spool(RetryRecord(id=id_, topic="crash", body=b"x" * 256))
            print("acked", id_, flush=True)  # only now may the "sidecar" answer 2xx

        await asyncio.gather(*(spool(i) for i in range(count)))
    while True:  # until the parent kills us, or (drain) the store is empty
        await loop.wait_idle()
        if mode == "drain" and store.kv.count("retry_pending") == 0:
            break
        await asyncio.sleep(0.01)  # idle but not empty: keys wait for their (short) rung
    await loop.close()
    await store.close()
    print("drained", flush=True)


if __name__ == "__main__":
    directory, port_text, mode_arg, *rest = sys.argv[1:]
    asyncio.run(main(directory, int(port_text), mode_arg, int(rest[0]) if rest else 0))
