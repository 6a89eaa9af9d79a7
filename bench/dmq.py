"""Rock-DMQ service-mode benchmark on real RocketMQ 4.9.4: lateness of `rocksidecar dmq` replicas, against
the broker's own 1 s delay level measured in the same run. Results: bench/RESULTS.md.

    .venv/bin/python -m bench.dmq [--namesrv 127.0.0.1:9876] [--replicas 3] [--pending 1000000]
                                  [--rate 2000] [--steady-s 20] [--burst 100000] [--levels 2000] [--quick]

pending  messages due tomorrow, scheduled into the replicas' stores (DelayStore.schedule_many) before they
         start, split evenly: the backlog the steady phase runs beside.
steady   inner messages falling due at `--rate`/s for `--steady-s` s (sent to the inner topic ahead).
burst    `--burst` inner messages all due in the same second, after the steady phase.
levels   `--levels` messages with RocketMQ's delay level 1 (1 s), sent by the Java client during the
         steady phase, consumed by the Java client.
Lateness is the broker's store timestamp of the published message minus its due time (DELAY_DUE_AT for
Rock-DMQ; the born time + 1 s for the delay level), in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import add_options, percentile
from rocksidecar.app.dmq import inner
from rocksidecar.app.service import COLUMN_FAMILIES
from rocksidecar.delay import DELAY_DUE_AT, DELAY_PUBLISHED_AT, DelayedMessage, DelayStore
from rocksidecar.rmq import BrokerApi, Message, MessageExt, MessageQueue, NameServerClient, RemotingClient
from rocksidecar.rmq.consumer import ConsumeFrom, ConsumerConfig, ConsumeStatus, PushConsumer
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.rocks import RocksKV
from tools.dmq_java import command

ROOT = Path(__file__).resolve().parents[1]
DIST = Path(os.environ.get("ROCKSIDECAR_ROCKETMQ_DIST", "/tmp/rocketmq-dist"))
BODY = b"x" * 256
CHUNK = 10_000


async def preload(store_dir: Path, ids: Sequence[str], due_ms: int) -> None:
    """A message per id, due at ``due_ms``, in the replica's store, through the store's public API."""
    kv = RocksKV.open(store_dir / "store", COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer)
    for start in range(0, len(ids), CHUNK):
        part = ids[start : start + CHUNK]
        await store.schedule_many([DelayedMessage(i, "bench_dmq_never", BODY, due_ms=due_ms) for i in part])
    await store.close()
    await writer.close()
    kv.close()


def start_replica(
    namesrv: str, data_dir: Path, inner_topic: str, group: str, http_addr: str = "127.0.0.1:0", **env: str
) -> subprocess.Popen[bytes]:
    """A `rocksidecar dmq` process; ``env``: more ROCKSIDECAR_* settings (the replicated mode's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCKSIDECAR_NAMESRV": namesrv,
           "ROCKSIDECAR_DATA_DIR": str(data_dir), "ROCKSIDECAR_LOG_LEVEL": "warning", **env}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "rocksidecar.app.cli", "dmq", "--inner-topic", inner_topic, "--group", group,
         "--http-addr", http_addr], cwd=ROOT, env=env,
    )  # fmt: skip


async def send_inner(producer: Producer, inner_topic: str, real_topic: str, dues: list[int]) -> None:
    msgs = [
        inner.inner_message(Message(real_topic, BODY, id=new_uniq_id()), due, inner_topic=inner_topic)
        for due in dues
    ]
    for start in range(0, len(msgs), 256):
        part = msgs[start : start + 256]
        results = await producer.send_batch(part, [m.id for m in part])
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise RuntimeError(f"{len(failed)} inner messages not sent: {failed[0]}")


def spawn(cmd: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


class Lateness:
    def __init__(self) -> None:
        self.by_due: dict[int, list[int]] = {}
        # The steady tail by stage: due -> picked (the replica's DELAY_PUBLISHED_AT: wake precision,
        # batching, loop stalls) and picked -> stored (producer, network, broker store timestamp).
        self.picked: dict[int, list[int]] = {}
        self.sending: dict[int, list[int]] = {}
        self.count = 0
        self.ids: set[str] = set()
        self.done = asyncio.Event()
        self.expected = 0

    async def __call__(self, msgs: Sequence[MessageExt], _mq: MessageQueue) -> ConsumeStatus:
        for m in msgs:
            due = m.properties.get(DELAY_DUE_AT)
            if due is not None:
                self.by_due.setdefault(int(due), []).append(m.store_timestamp_ms - int(due))
                picked = m.properties.get(DELAY_PUBLISHED_AT)
                if picked is not None:
                    self.picked.setdefault(int(due), []).append(int(picked) - int(due))
                    self.sending.setdefault(int(due), []).append(m.store_timestamp_ms - int(picked))
                self.count += 1
                self.ids.add(m.uniq_key or "")
        self.done.set()
        return ConsumeStatus.SUCCESS


async def read_lateness(namesrv: str, group: str, topic: str) -> tuple[Lateness, PushConsumer]:
    """A started push consumer of ``topic`` (close it) noting each message's lateness."""
    lateness = Lateness()
    consumer = PushConsumer(
        ConsumerConfig(group=group, consume_from=ConsumeFrom.FIRST_OFFSET, consume_batch_size=32),
        namesrv, lateness,
    )  # fmt: skip
    consumer.subscribe(topic)
    await consumer.start()
    return lateness, consumer


def summary(name: str, lateness: list[int]) -> str:
    lateness = sorted(lateness)
    return (f"{name}: n={len(lateness)} p50={percentile(lateness, 50):.0f} ms "
            f"p99={percentile(lateness, 99):.0f} ms max={lateness[-1] if lateness else 0} ms")  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    tag = secrets.token_hex(3)
    inner_topic, real_topic, level_topic = f"bdmq_inner_{tag}", f"bdmq_real_{tag}", f"bdmq_level_{tag}"
    group = f"bdmq_{tag}"
    root = Path(tempfile.mkdtemp(prefix="bench-dmq-"))
    t = time.monotonic()
    tomorrow = time.time_ns() // 1_000_000 + 86_400_000
    per = args.pending // args.replicas
    for i in range(args.replicas):
        (root / f"r{i}").mkdir()
        await preload(root / f"r{i}", [new_uniq_id() for _ in range(per)], tomorrow)
    print(f"preloaded {per * args.replicas} pending in {time.monotonic() - t:.1f} s", flush=True)

    client = RemotingClient()
    producer = Producer(NameServerClient(client, args.namesrv), BrokerApi(client), ProducerConfig())
    await producer.start()
    await producer.send(inner.cancel_message("nothing", inner_topic=inner_topic))  # creates the topic
    await producer.send(Message(real_topic, b"warm"))
    lateness, consumer = await read_lateness(args.namesrv, f"{group}_reader", real_topic)
    replicas = [start_replica(args.namesrv, root / f"r{i}", inner_topic, group) for i in range(args.replicas)]
    try:
        steady_n = args.rate * args.steady_s
        now = time.time_ns() // 1_000_000
        steady_start = now + 20_000 + (steady_n + args.burst) // 2  # time to send and store everything ahead
        steady = [steady_start + i * 1000 // args.rate for i in range(steady_n)]
        burst_due = steady_start + args.steady_s * 1000 + 2000
        lateness.expected = steady_n + args.burst
        t = time.monotonic()
        await send_inner(producer, inner_topic, real_topic, steady)
        await send_inner(producer, inner_topic, real_topic, [burst_due] * args.burst)
        starts_in = (steady_start - time.time_ns() // 1_000_000) / 1000
        print(f"sent {lateness.expected} inner messages in {time.monotonic() - t:.1f} s; steady phase "
              f"starts in {starts_in:.1f} s", flush=True)  # fmt: skip
        level_rows: list[tuple[str, list[int]]] = []
        if args.levels:
            await asyncio.sleep(max(steady_start - time.time_ns() // 1_000_000, 0) / 1000)
            java_consumer = spawn(
                command(DIST, "consume", args.namesrv, level_topic, f"{group}_lvl", str(args.levels), "120")
            )
            sent = await asyncio.to_thread(
                subprocess.run, command(DIST, "levels", args.namesrv, level_topic, str(args.levels), "1"),
                capture_output=True, check=True,
            )  # fmt: skip
            due = {p[1]: int(p[2]) for p in (ln.split() for ln in sent.stdout.decode().splitlines())
                   if p and p[0] == "sent"}  # fmt: skip
            out, _ = await asyncio.to_thread(java_consumer.communicate)
            got = [ln.split() for ln in out.decode().splitlines() if ln.startswith("got ")]
            level_l = [int(g[4]) - due[g[1]] for g in got if g[1] in due]
            level_rows = [(summary("RocketMQ 4.9.4 delay level 1 (1 s)", level_l), level_l)]
        async with asyncio.timeout(burst_due / 1000 - time.time() + 120):
            while len(lateness.ids) < lateness.expected:
                lateness.done.clear()
                await lateness.done.wait()
        steady_l = [x for d, v in lateness.by_due.items() if d != burst_due for x in v]
        burst_l = lateness.by_due.get(burst_due, [])
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"Rock-DMQ, {args.replicas} replicas, {per * args.replicas} pending, RocketMQ 4.9.4 "
              f"({args.namesrv}), load average {load}:")  # fmt: skip
        print("  " + summary(f"steady {args.rate}/s for {args.steady_s} s", steady_l))
        for stage, rows in (
            ("due -> picked", lateness.picked),
            ("picked -> broker stored", lateness.sending),
        ):
            print("    " + summary(stage, [x for d, v in rows.items() if d != burst_due for x in v]))
        print("  " + summary(f"burst of {args.burst} due in one second (max = all published after)", burst_l))
        dups = lateness.count - len(lateness.ids)
        print(f"  duplicates: {dups} (stored by two replicas across a rebalance)")
        for row, level_l in level_rows:
            print("  " + row)
            steady_p99 = percentile(sorted(steady_l), 99)
            print(f"  ratio: delay level 1 p99 / Rock-DMQ steady p99 = "
                  f"{percentile(sorted(level_l), 99) / max(steady_p99, 1):.2f}")  # fmt: skip
    finally:
        for p in replicas:
            p.send_signal(signal.SIGTERM)
        for p in replicas:
            p.wait()
        await consumer.close()
        await producer.close()
        await client.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--namesrv", default=os.environ.get("ROCKSIDECAR_TEST_NAMESRV", "127.0.0.1:9876"))
    add_options(p, replicas=3, pending=1_000_000, rate=2000, steady_s=20, burst=100_000, levels=2000)
    p.add_argument(
        "--quick", action="store_true", help="100 000 pending, 8 s steady, bursts of 10 000, 500 levels"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.pending, args.steady_s, args.burst, args.levels = 100_000, 8, 10_000, 500
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
