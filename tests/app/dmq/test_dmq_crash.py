"""Sync before commit: SIGKILL `rocksidecar dmq` after it stored (and even published) inner messages but
before their offsets were committed; the restarted process gets them again and publishes each once."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from rocksidecar.app.dmq import inner
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.message import Message, MessageQueue
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.app.dmq.conftest import INNER_TOPIC, REAL_TOPIC, Received, real_consumer

ROOT = Path(__file__).resolve().parents[3]
GROUP = "dmq_crash_group"
START_S = 180  # a process start: ~20 s under load on a shared 2-core machine, several at once
POLL_S = 0.05  # the child's /metrics is the only view of its progress: read it this often
# The late message must still be waiting when the process is killed, after the early one was sent,
# stored, published and recorded: on a loaded 2-core machine a 5 s margin failed about 1 run in 8. The
# test waits for it only after the restart, so a wide margin costs little.
LATE_MS = 15_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_dmq(
    namesrv: str,
    data_dir: Path,
    port: int,
    *,
    inner_topic: str = INNER_TOPIC,
    group: str = GROUP,
    persist_s: str = "600",  # by default no commit within a test
    log_to: Path | None = None,
) -> asyncio.subprocess.Process:
    """`rocksidecar dmq` in a child process, once it has started."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ROCKSIDECAR_NAMESRV": namesrv,
        "ROCKSIDECAR_DATA_DIR": str(data_dir),
        "ROCKSIDECAR_LOG_FORMAT": "text",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rocksidecar.app.cli", "dmq", "--inner-topic", inner_topic, "--group", group,
        "--http-addr", f"127.0.0.1:{port}", "--offset-persist-s", persist_s,
        cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[bytes] = []
    async with asyncio.timeout(START_S):
        while b"dmq started" not in (line := await proc.stderr.readline()):
            assert line, "dmq exited before it started: " + b"".join(seen[-20:]).decode(errors="replace")
            seen.append(line)
    # keep draining: never block the child (into ``log_to`` when given, for a failing run's story)
    asyncio.get_running_loop().create_task(_drain(proc.stderr, log_to))
    return proc


async def _drain(stream: asyncio.StreamReader, log_to: Path | None) -> None:
    if log_to is None:
        await stream.read()
        return
    with log_to.open("ab") as out:
        while chunk := await stream.read(65536):
            out.write(chunk)
            out.flush()


async def metric(port: int, line_start: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    found = re.search(rf"^{re.escape(line_start)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def inner_count(outcome: str) -> str:
    return f'rocksidecar_dmq_inner_messages_total{{outcome="{outcome}"}}'


async def until_metric(port: int, line_start: str, done: Callable[[float], bool]) -> None:
    async with asyncio.timeout(20):
        while not done(await metric(port, line_start)):  # noqa: ASYNC110 - another process: no event
            await asyncio.sleep(POLL_S)


async def test_sigkill_between_store_and_commit_publishes_once(cluster: DevCluster, tmp_path: Path) -> None:
    client = RemotingClient()
    api = BrokerApi(client)
    producer = Producer(NameServerClient(client, cluster.namesrv_addr), api, ProducerConfig())
    await producer.start()
    received = Received()
    reader = await real_consumer(cluster, received, "dmq_crash_reader")
    port = free_port()
    proc = await start_dmq(cluster.namesrv_addr, tmp_path / "dmq", port)
    try:
        now = time.time_ns() // 1_000_000
        early, late = new_uniq_id(), new_uniq_id()
        sent = {}
        # On queues of their own (sharding keys whose Java hashes differ by one: another queue for any
        # count): a pull carries the consumer's offset to commit (as Java's does), and a pull that found
        # the late one behind the early one in the same queue committed past the early one (1 run in ~8).
        for id_, due, key in ((early, now + 200, "a"), (late, now + LATE_MS, "b")):
            msg = inner.inner_message(Message(REAL_TOPIC, id_.encode(), id=id_), due, inner_topic=INNER_TOPIC)
            sent[id_] = await producer.send(msg, sharding_key=key)
        assert sent[early].queue != sent[late].queue
        await until_metric(port, inner_count("scheduled"), lambda v: v >= 2)  # both synced in the store
        await received.until(lambda got: early in {m.uniq_key for m in got})  # and one already published
        # ... and recorded as sent: a kill between the publish and that record publishes it again after
        # the restart (at-least-once), which is not what this test is about.
        await until_metric(port, "rocksidecar_delay_scheduled", lambda v: v == 1)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        for result in sent.values():  # the crash came before any commit of those offsets
            mq = MessageQueue(INNER_TOPIC, result.queue.broker_name, result.queue.queue_id)
            addr = cluster.brokers[result.queue.broker_name].addr
            committed = await api.query_consumer_offset(addr, GROUP, mq)
            assert committed is None or committed <= result.queue_offset

        proc = await start_dmq(cluster.namesrv_addr, tmp_path / "dmq", port)
        # both inner messages came again (their offsets were never committed) and were recognised
        await until_metric(port, inner_count("duplicate"), lambda v: v >= 2)
        await received.until(lambda got: late in {m.uniq_key for m in got})
        marker = new_uniq_id()  # due after everything above: once it arrives, nothing else is on its way
        due = now + LATE_MS + 300
        msg = inner.inner_message(Message(REAL_TOPIC, b"m", id=marker), due, inner_topic=INNER_TOPIC)
        await producer.send(msg, sharding_key=marker)
        await received.until(lambda got: marker in {m.uniq_key for m in got})
        ids = received.ids()
        assert ids.count(early) == 1 and ids.count(late) == 1
        assert await metric(port, inner_count("scheduled")) == 1  # only the marker was new to it
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        await reader.close()
        await producer.close()
        await client.close()
