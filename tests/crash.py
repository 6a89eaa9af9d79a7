"""Shared by the SIGKILL crash tests: a child process that prints ``acked|sent|failed|drained <id>``
lines, counted across runs by the parent, which kills it once enough messages reached devbroker; the
kill-twice-then-drain sequence; and a devbroker with the test topic."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, RemotingClient

ROOT = Path(__file__).resolve().parents[1]


class Child:
    """One run of ``module``; ``acked`` and ``sent`` accumulate across runs."""

    def __init__(self, module: str, acked: set[str], sent: Counter[str]) -> None:
        self.module = module
        self.acked, self.sent = acked, sent
        self.failed = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.progress = asyncio.Event()
        self.drained = False

    async def run(self, *args: str) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", self.module, *args,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            word, _, id_ = line.decode().strip().partition(" ")
            if word == "acked":
                self.acked.add(id_)
            elif word == "sent":
                self.sent[id_] += 1
            elif word == "failed":
                self.failed += 1
            self.drained = self.drained or word == "drained"
            self.progress.set()
        await self.proc.wait()

    async def kill_when(self, sent_total: int) -> None:
        while sum(self.sent.values()) < sent_total:
            self.progress.clear()
            await self.progress.wait()
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)


@dataclass
class Runs:
    acked: set[str]  # ids the child acknowledged (synced), over all runs
    sent: Counter[str]  # ids devbroker confirmed, with repeats
    killed_at: int  # confirmed sends when the first SIGKILL landed
    first_failed: int  # failed sends in the first run


async def kill_twice_then_drain(
    module: str, first: list[str], drain: list[str], n: int, timeout_s: float
) -> Runs:
    """Run ``module`` with ``first`` and SIGKILL it after n/4 confirmed sends; run it with ``drain`` and
    SIGKILL it after n/4 more; run it with ``drain`` once more, to its clean end."""
    acked: set[str] = set()
    sent: Counter[str] = Counter()
    child = Child(module, acked, sent)
    running = asyncio.create_task(child.run(*first))
    await asyncio.wait_for(child.kill_when(n // 4), timeout_s)
    await running
    assert child.proc is not None and child.proc.returncode == -signal.SIGKILL
    runs = Runs(acked, sent, sum(sent.values()), child.failed)
    again = Child(module, acked, sent)
    running = asyncio.create_task(again.run(*drain))
    await asyncio.wait_for(again.kill_when(runs.killed_at + n // 4), timeout_s)
    await running
    last = Child(module, acked, sent)
    await asyncio.wait_for(last.run(*drain), timeout_s)
    assert last.drained and last.proc is not None and last.proc.returncode == 0
    return runs


@contextlib.asynccontextmanager
async def cluster_with_topic(topic: str) -> AsyncIterator[DevCluster]:
    """A two-broker devbroker with ``topic`` created on both brokers."""
    async with DevCluster(brokers=2, queues=4) as cluster:
        client = RemotingClient()
        api = BrokerApi(client, producer_group="setup")
        for broker in cluster.brokers.values():
            await api.create_topic(broker.addr, topic)
        await client.close()
        yield cluster
