"""Rock-DMQ service on real RocketMQ 4.9.4: a Java producer sends delayed messages to the inner topic, a
Java consumer receives them on the real topic; three `rocksidecar dmq` replicas, one SIGKILLed and
restarted mid-stream: none lost, none early, duplicates counted and bounded."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from rocksidecar.app.dmq import inner
from rocksidecar.delay.scheduler import BATCH_MAX, MAX_IN_FLIGHT
from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.app.dmq.test_dmq_crash import free_port, start_dmq
from tools.dmq_java import command

DIST = Path(os.environ.get("ROCKSIDECAR_TEST_ROCKETMQ_DIST", "/tmp/rocketmq-dist"))
COUNT = int(os.environ.get("ROCKSIDECAR_TEST_DMQ_COUNT", "20000"))
SPREAD_MS = 30_000
REPLICAS = 3


@pytest.fixture
def java() -> None:
    if shutil.which("javac") is None or not (DIST / "lib").is_dir():
        pytest.skip(
            f"needs javac and a RocketMQ 4.9.4 distribution at {DIST} (ROCKSIDECAR_TEST_ROCKETMQ_DIST)"
        )


async def warm_topics(namesrv: str, inner_topic: str, real_topic: str) -> None:
    """Create both topics (the brokers auto-create on first send) so no consumer waits for a rebalance."""
    client = RemotingClient()
    producer = Producer(NameServerClient(client, namesrv), BrokerApi(client), ProducerConfig())
    await producer.start()
    try:
        await producer.send(inner.cancel_message("nothing", inner_topic=inner_topic))
        await producer.send(Message(real_topic, b"warm", tags="warmup"))
    finally:
        await producer.close()
        await client.close()


async def java_proc(*args: str, log_to: Path | None = None) -> asyncio.subprocess.Process:
    """DmqLoad ``args``; its stderr (the client's exceptions) into ``log_to`` when given."""
    with open(log_to or os.devnull, "ab") as err:  # noqa: ASYNC230 - a local file, opened once
        return await asyncio.create_subprocess_exec(
            *command(DIST, *args), stdout=asyncio.subprocess.PIPE, stderr=err
        )


async def lines(proc: asyncio.subprocess.Process, prefix: bytes, out: list[list[str]]) -> None:
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        if line.startswith(prefix):
            out.append(line.decode().split()[1:])


@pytest.mark.usefixtures("java")
@pytest.mark.timeout(480)  # 25 s lead + 30 s spread + its own 270 s bound; Java start-up on a loaded machine
async def test_java_clients_three_replicas_one_killed(namesrv_addr: str, tmp_path: Path) -> None:
    tag = secrets.token_hex(3)
    inner_topic, real_topic, group = f"dmq_rb_inner_{tag}", f"dmq_rb_real_{tag}", f"dmq_rb_{tag}"
    await warm_topics(namesrv_addr, inner_topic, real_topic)
    got: list[list[str]] = []
    # every id, then 15 s for late duplicates (a replica re-publishes what it had in flight at its restart,
    # a third of the way in): it waited for an id that never comes, its whole 300 s, in every run
    consumer = await java_proc(
        "consume", namesrv_addr, real_topic, f"{group}_reader", str(COUNT), "300", "15"
    )
    reading = asyncio.ensure_future(lines(consumer, b"got ", got))
    ports = [free_port() for _ in range(REPLICAS)]
    replicas = [
        await start_dmq(
            namesrv_addr, tmp_path / f"r{i}", ports[i], inner_topic=inner_topic, group=group, persist_s="5"
        )
        for i in range(REPLICAS)
    ]
    try:
        first_due = time.time_ns() // 1_000_000 + 25_000  # after the producer is done (~10 s for 20 000)
        sent: list[list[str]] = []
        producer = await java_proc("produce", namesrv_addr, inner_topic, real_topic, str(COUNT),
                                   str(first_due), str(SPREAD_MS))  # fmt: skip
        await lines(producer, b"sent ", sent)
        assert await producer.wait() == 0 and len(sent) == COUNT
        # mid-stream: a third of the messages are due by now
        await asyncio.sleep(max(first_due + SPREAD_MS // 3 - time.time_ns() // 1_000_000, 0) / 1000)
        replicas[1].send_signal(signal.SIGKILL)
        await replicas[1].wait()
        await asyncio.sleep(3)  # down for 3 s: its own due messages wait for it, its queues move
        replicas[1] = await start_dmq(namesrv_addr, tmp_path / "r1", ports[1], inner_topic=inner_topic,
                                      group=group, persist_s="5")  # fmt: skip
        async with asyncio.timeout(SPREAD_MS / 1000 + 240):
            await reading
            await consumer.wait()
    finally:
        for proc in [*replicas, consumer]:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await proc.wait()
    due = {id_: int(d) for id_, d in sent}
    deliveries = Counter(row[0] for row in got if row[0] in due)
    lost = set(due) - set(deliveries)
    early = [row for row in got if row[0] in due and int(row[3]) < due[row[0]]]  # stored before its due time
    duplicates = sum(deliveries.values()) - len(deliveries)
    lateness = sorted(int(row[2]) - due[row[0]] for row in got if row[0] in due)
    print(f"dmq realbroker: {COUNT} sent, {len(deliveries)} received, {duplicates} duplicates, lateness "
          f"p50 {lateness[len(lateness) // 2]} ms p99 {lateness[len(lateness) * 99 // 100]} ms "
          f"max {lateness[-1]} ms")  # fmt: skip
    assert not lost, f"{len(lost)} lost"
    assert not early, early[:5]
    # A killed replica re-publishes at most what it had in flight (published, "sent" not yet recorded);
    # its inner offsets were committed long before (the producer finished > 5 s earlier).
    assert duplicates <= BATCH_MAX * MAX_IN_FLIGHT
