"""The Spark read source against real RocketMQ 4.9.4 (topics spark6_*):
- 100 000 messages from a Java DefaultMQProducer (binary bodies of 1-600 bytes, tags, two keys, user
  properties) read by one batch query: every message once, each field byte for byte as Java sent it;
- a streaming job of its own process copying a topic through the sidecar (idColumn = the origin) is
  SIGKILLed twice (process group: driver, JVM, Python workers) while a micro-batch is being written and
  restarted on its checkpoint: a Java pull consumer then finds each source message exactly once in the
  target topic."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.sidecar_process import sidecar_process
from rocksidecar.pipeline import origin_id
from rocksidecar.rmq import BrokerApi, MessageQueue, NameServerClient, RemotingClient
from tests.pipeline.spark_local import local_spark
from tests.realbroker import java_probe
from tests.realbroker.conftest import new_topic

pytestmark = [pytest.mark.realbroker, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[2]


def body(i: int) -> bytes:
    """SparkProbe.body(i)."""
    return bytes((i * 131 + j * 17 + (j >> 3)) & 0xFF for j in range(1 + (i * 7919) % 600))


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = local_spark("local[2]", "spark6-realbroker")
    yield session
    session.stop()


async def produce(namesrv: str, topic: str, n: int) -> dict[int, str]:
    """``n`` messages from SparkProbe's Java producer: message id by index."""
    sent = {}
    for line in await java_probe.output("produce", namesrv, topic, str(n), main="SparkProbe", timeout_s=900):
        if line.startswith("SENT "):
            _, i, msg_id = line.split(" ")
            sent[int(i)] = msg_id
    assert len(sent) == n
    return sent


async def dump(namesrv: str, topic: str) -> list[tuple[str, str, str]]:
    """(rocksidecarId or "-", sha-256 of the body, the origin) of every message in ``topic``, read by
    SparkProbe's Java pull consumer."""
    lines = await java_probe.output("dump", namesrv, topic, main="SparkProbe", timeout_s=600)
    got = []
    for line in lines:
        if line.startswith("MSG "):
            _, msg_id, sha, where = line.split(" ")
            broker, queue_id, offset = where.rsplit(":", 2)
            got.append((msg_id, sha, origin_id(topic, broker, int(queue_id), int(offset))))
    assert f"END {len(got)}" in lines  # (the client's own log lines go to stdout too)
    return got


def test_100k_java_messages_read_byte_exact(spark: SparkSession, namesrv_addr: str) -> None:
    n = 100_000
    topic = asyncio.run(new_topic(namesrv_addr, "spark6_read"))
    sent = asyncio.run(produce(namesrv_addr, topic, n))
    rows = (
        spark.read.format("rocksidecar")
        .option("namesrv", namesrv_addr)
        .option("topic", topic)
        .load()
        .select("msgId", "uniqKey", "body", "tags", "keys", "properties", "topic", "queueOffset")
        .collect()
    )
    assert len(rows) == n
    seen: set[int] = set()
    for r in rows:
        i = int(r.properties["i"])
        assert i not in seen, f"message {i} read twice"
        seen.add(i)
        assert (r.msgId, r.uniqKey) == (sent[i], sent[i])
        assert bytes(r.body) == body(i), f"message {i}: body differs"
        assert (r.tags, r.keys, r.properties) == (f"t{i % 5}", [f"k{i}", "x"], {"i": str(i), "p": str(i % 3)})
        assert r.topic == topic
    assert seen == set(range(n))


async def target_count(namesrv: str, topic: str) -> int:
    """Messages in ``topic`` now (the sum of its queues' max offsets; 0 while it has no route)."""
    client = RemotingClient()
    try:
        try:
            route = await NameServerClient(client, namesrv).get_route(topic)
        except Exception:
            return 0
        api, total = BrokerApi(client), 0
        for mq in route.subscribe_queues(topic):
            addr = route.master_addr(mq.broker_name)
            if addr is not None:
                total += await api.get_max_offset(addr, MessageQueue(topic, mq.broker_name, mq.queue_id))
        return total
    finally:
        await client.close()


def start_job(
    namesrv: str, source: str, target: str, endpoint: str, checkpoint: Path, log: Path
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.realbroker.spark_copy_job", namesrv, source, target, endpoint]
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*args, str(checkpoint), "1000"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def batch_ids(log_dir: Path) -> set[int]:
    """The micro-batch ids in one of Spark's checkpoint logs (offsets/ or commits/)."""
    return {int(p.name) for p in log_dir.glob("[0-9]*")} if log_dir.is_dir() else set()


def kill_mid_batch(job: subprocess.Popen[bytes], namesrv: str, target: str, checkpoint: Path) -> int:
    """SIGKILL the job's process group once a micro-batch is planned (in offsets/), not committed (not in
    commits/) and some of its messages reached the target: mid-write. Returns that batch id. Polled:
    another process's files and a broker's offsets announce nothing."""
    base = asyncio.run(target_count(namesrv, target))
    for _ in range(6000):
        if job.poll() is not None:
            raise AssertionError(f"the job ended (exit {job.returncode}) before it could be killed mid-batch")
        open_batches = batch_ids(checkpoint / "offsets") - batch_ids(checkpoint / "commits")
        if open_batches and asyncio.run(target_count(namesrv, target)) > base:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            return max(open_batches)
        time.sleep(0.2)
    raise AssertionError("no micro-batch was seen being written")


def test_stream_round_trip_through_two_sigkills_exactly_once(namesrv_addr: str, tmp_path: Path) -> None:
    n = 6000
    source = asyncio.run(new_topic(namesrv_addr, "spark6_src"))
    target = asyncio.run(new_topic(namesrv_addr, "spark6_dst"))
    asyncio.run(produce(namesrv_addr, source, n))
    checkpoint, log = tmp_path / "ckpt", tmp_path / "job.log"
    with sidecar_process(namesrv_addr, tmp_path) as (url, _):
        killed = []
        for _ in range(2):
            job = start_job(namesrv_addr, source, target, url, checkpoint, log)
            killed.append(kill_mid_batch(job, namesrv_addr, target, checkpoint))
        job = start_job(namesrv_addr, source, target, url, checkpoint, log)
        assert job.wait(timeout=1200) == 0, log.read_text()[-3000:]
    copied = asyncio.run(dump(namesrv_addr, target))
    twice = {i: k for i, k in Counter(i for i, _, _ in copied).items() if k > 1}
    assert twice == {}, f"{len(twice)} duplicated (killed in micro-batches {killed})"
    # each output message's id is its source message's origin, and its body is that message's
    originals = {origin: sha for _, sha, origin in asyncio.run(dump(namesrv_addr, source))}
    assert len(originals) == n
    assert {i: sha for i, sha, _ in copied} == originals, f"killed in micro-batches {killed}"
