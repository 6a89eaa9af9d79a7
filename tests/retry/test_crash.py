"""SIGKILL while replaying: every message acknowledged as spooled is delivered at least once after
restarts, and the store ends empty (R1, R3, R6).

The receiver is a stand-in for devbroker (not merged yet): a TCP server in this process that counts
deliveries by id and turns away the first attempt of every seventh id, so reschedules are in flight
when the kill lands.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from retry.keys import PENDING_CF
from retry.store import RetryStore

N = 3000
ROOT = Path(__file__).resolve().parents[2]
PHASE_TIMEOUT_S = 60.0


class StandInReceiver:
    def __init__(self) -> None:
        self.deliveries: Counter[str] = Counter()
        self.reject_first = True
        self.arrived = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            id_ = line.decode().strip()
            if self.reject_first and int(id_[3:]) % 7 == 0 and id_ not in self.deliveries:
                self.deliveries[id_] += 0  # seen, not delivered
                writer.write(b"retry\n")
            else:
                self.deliveries[id_] += 1
                writer.write(b"ok\n")
            self.arrived.set()
            await writer.drain()
        writer.close()

    def delivered(self) -> int:
        return sum(1 for c in self.deliveries.values() if c > 0)

    async def until_delivered(self, count: int) -> None:
        while self.delivered() < count:
            self.arrived.clear()
            await self.arrived.wait()


async def start_child(store: Path, port: int, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.retry.crash_child",
        str(store),
        str(port),
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def read_acks(child: asyncio.subprocess.Process, acked: set[str]) -> None:
    assert child.stdout is not None
    while line := await child.stdout.readline():
        word, _, id_ = line.decode().strip().partition(" ")
        if word == "acked":
            acked.add(id_)


async def kill_after(child: asyncio.subprocess.Process, receiver: StandInReceiver, deliveries: int) -> None:
    await asyncio.wait_for(receiver.until_delivered(deliveries), PHASE_TIMEOUT_S)
    child.send_signal(signal.SIGKILL)
    assert await child.wait() == -signal.SIGKILL


async def test_sigkill_while_replaying_loses_nothing(tmp_path: Path) -> None:
    receiver = StandInReceiver()
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = tmp_path / "store"
    acked: set[str] = set()
    try:
        # 1: spool N (acknowledged one by one as they are synced) and replay; killed mid-way
        child = await start_child(store, port, "spool", str(N))
        reader = asyncio.create_task(read_acks(child, acked))
        await kill_after(child, receiver, N // 4)
        await reader
        delivered_at_kill = receiver.delivered()
        assert N // 4 <= delivered_at_kill < len(acked)  # killed while replaying
        # 2: restart, replay; killed again
        child = await start_child(store, port, "drain")
        await kill_after(child, receiver, min(len(acked), receiver.delivered() + N // 4))
        # 3: restart and drain to the end
        receiver.reject_first = False
        child = await start_child(store, port, "drain")
        out, _ = await asyncio.wait_for(child.communicate(), PHASE_TIMEOUT_S)
        assert child.returncode == 0
        assert b"drained" in out
    finally:
        server.close()
        await server.wait_closed()
    missing = sorted(acked - {i for i, c in receiver.deliveries.items() if c > 0})
    assert missing == [], f"{len(missing)} acknowledged messages never delivered: {missing[:5]}"
    print(
        f"acked {len(acked)}/{N}; first kill after {delivered_at_kill} delivered; "
        f"{sum(receiver.deliveries.values())} deliveries in all (duplicates allowed)"
    )
    reopened = RetryStore.open(store)
    try:
        assert reopened.kv.count(PENDING_CF) == 0
        assert reopened.dead_count == 0
    finally:
        await reopened.close()
