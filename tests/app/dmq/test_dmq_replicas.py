"""Replicated Rock-DMQ on devbroker, one test per row of the README's failure table ("Rock-DMQ
replicas"): three `rocksidecar dmq` processes with --replicas; replicas are SIGKILLed, stopped, restarted
on a wiped data dir; a broker and the name server are stopped. Each test checks what the table promises:
every message published (none lost), none before its due time, and, where a replica is gone, its share
published by the others."""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocksidecar.app.dmq import inner, marks
from rocksidecar.delay import DELAY_DUE_AT
from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.http_admin import build_app
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.app.dmq.conftest import INNER_TOPIC, REAL_TOPIC, Received, create_topics, real_consumer
from tests.app.dmq.test_dmq_crash import ROOT, START_S, free_port, inner_count, metric

MARKS_TOPIC = "dmq_test_marks"
GROUP = "dmq_replicas_group"
NAMES = ("r0", "r1", "r2")
WAIT_S = 60.0
TAIL_LINES = 40
STATE_METRICS = ("rocksidecar_dmq_", "rocksidecar_delay_", "rocksidecar_consumer_")


@dataclass
class Replica:
    name: str
    namesrv: str
    data_dir: Path
    copies: int
    group: str = GROUP
    port: int = field(default_factory=free_port)
    args: tuple[str, ...] = ()
    proc: asyncio.subprocess.Process | None = None
    # the last lines it logged, for a failure's message (a wait that times out says why, in CI too)
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    peers: list[Replica] = field(default_factory=list)  # the setup's replicas: a timeout shows them all

    async def start(self) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "ROCKSIDECAR_NAMESRV": self.namesrv,
            "ROCKSIDECAR_DATA_DIR": str(self.data_dir),
            "ROCKSIDECAR_DMQ_REPLICAS": ",".join(NAMES),
            "ROCKSIDECAR_DMQ_COPIES": str(self.copies),
            "ROCKSIDECAR_DMQ_MARKS_TOPIC": MARKS_TOPIC,
            "ROCKSIDECAR_SEND_TIMEOUT_MS": "1000",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rocksidecar.app.cli", "dmq", "--inner-topic", INNER_TOPIC,
            "--group", self.group, "--instance", self.name, "--http-addr", f"127.0.0.1:{self.port}",
            "--offset-persist-s", "1", "--presence-interval-s", "0.2", *self.args,
            cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        async with asyncio.timeout(START_S):
            while b"dmq started" not in (line := await proc.stderr.readline()):
                assert line, f"dmq {self.name} exited before it started"
        asyncio.get_running_loop().create_task(self._drain(proc.stderr))
        self.proc = proc

    async def _drain(self, stderr: asyncio.StreamReader) -> None:
        while line := await stderr.readline():
            self.tail.append(line.decode(errors="replace").rstrip())

    async def state(self) -> str:
        """Its replication metrics and last log lines (a timeout's message)."""
        try:
            async with httpx.AsyncClient() as client:
                text = (await client.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5)).text
        except httpx.HTTPError as exc:
            text = f"(metrics not read: {exc!r})"
        lines = [ln for ln in text.splitlines() if ln.startswith(STATE_METRICS)]
        return "\n".join([f"--- {self.name} metrics", *lines, f"--- {self.name} log", *self.tail])

    async def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        await self.proc.wait()
        self.proc = None

    async def until(self, line_start: str, done: Callable[[float], bool]) -> None:
        value = None
        try:
            async with asyncio.timeout(WAIT_S):
                while not done(value := await metric(self.port, line_start)):  # noqa: ASYNC110 - another process
                    await asyncio.sleep(0.05)
        except TimeoutError:
            states = [await r.state() for r in self.peers or [self] if r.proc is not None]
            raise AssertionError(
                "\n".join([f"{self.name}: {line_start} stayed at {value}", *states])
            ) from None


@dataclass
class Setup:
    cluster: DevCluster
    producer: Producer
    received: Received
    replicas: list[Replica]
    tmp: Path

    def replica(self, name: str, copies: int) -> Replica:
        r = Replica(name, self.cluster.namesrv_addr, self.tmp / name, copies, peers=self.replicas)
        self.replicas.append(r)
        return r

    async def start_all(self, copies: int) -> list[Replica]:
        rs = [self.replica(n, copies) for n in NAMES]
        await asyncio.gather(*(r.start() for r in rs))
        for r in rs:  # every replica sees every other as a publisher: no take-over in progress
            await r.until("rocksidecar_dmq_publishers", lambda v: v == len(NAMES))
        return rs

    async def send(self, n: int, due_in_ms: int, spread_ms: int = 0) -> dict[str, int]:
        now = time.time_ns() // 1_000_000
        due = {new_uniq_id(): now + due_in_ms + (spread_ms * i // max(1, n)) for i in range(n)}
        for id_, at in due.items():
            msg = inner.inner_message(Message(REAL_TOPIC, id_.encode(), id=id_), at, inner_topic=INNER_TOPIC)
            await self.producer.send(msg, sharding_key=id_)
        return due

    async def stored(self, rs: list[Replica], total: int, outcomes: tuple[str, ...] = ("scheduled",)) -> None:
        """Until the replicas ``rs`` together counted ``total`` copies under ``outcomes``."""

        async def counts() -> dict[str, dict[str, float]]:
            names = ("scheduled", "duplicate", "not_held", "cancelled_before", "malformed")
            return {r.name: {o: await metric(r.port, inner_count(o)) for o in names} for r in rs}

        def done(seen: dict[str, dict[str, float]]) -> bool:
            return sum(c[o] for c in seen.values() for o in outcomes) >= total

        await self._until(rs, counts, done, f"not {total} copies {outcomes}")

    async def until_sum(self, rs: list[Replica], line_start: str, total: float) -> None:
        """Until the metric ``line_start`` summed over ``rs`` reached ``total``."""

        async def values() -> list[float]:
            return [await metric(r.port, line_start) for r in rs]

        await self._until(rs, values, lambda seen: sum(seen) >= total, f"{line_start} not {total}")

    async def _until(
        self, rs: list[Replica], read: Callable[[], Awaitable[Any]], done: Callable[[Any], bool], what: str
    ) -> None:
        """Poll ``read()`` until ``done``; a timeout names what was seen and shows the replicas' states."""
        seen = await read()
        try:
            async with asyncio.timeout(WAIT_S):
                while not done(seen):
                    await asyncio.sleep(0.05)  # other processes: their /metrics is the only view
                    seen = await read()
        except TimeoutError:
            states = [await r.state() for r in rs if r.proc is not None]
            raise AssertionError("\n".join([f"{what}: {seen}", *states])) from None

    def check(self, due: dict[str, int]) -> list[float]:
        """Every id arrived, none before its due time; returns each first arrival's lateness (s)."""
        first: dict[str, int] = {}
        for m in self.received.got:
            id_ = m.uniq_key or ""
            if id_ in due:
                assert m.store_timestamp_ms >= due[id_], f"{id_} published early"
                assert int(m.properties[DELAY_DUE_AT]) == due[id_]
                first[id_] = min(first.get(id_, m.store_timestamp_ms), m.store_timestamp_ms)
        assert set(first) == set(due), f"{len(set(due) - set(first))} lost"
        return [(first[i] - due[i]) / 1000 for i in due]


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async with DevCluster(brokers=2, queues=4) as cluster:
        await create_topics(cluster, REAL_TOPIC, INNER_TOPIC)
        client = RemotingClient()
        producer = Producer(
            NameServerClient(client, cluster.namesrv_addr), BrokerApi(client), ProducerConfig()
        )
        await producer.start()
        await producer.send(
            Message(MARKS_TOPIC, marks.encode("test", []), properties={inner.OP: marks.OP_MARK})
        )
        received = Received()
        reader = await real_consumer(cluster, received, "dmq_replicas_reader")
        s = Setup(cluster, producer, received, [], tmp_path)
        try:
            yield s
        finally:
            for r in s.replicas:
                if r.proc is not None:
                    await r.signal(signal.SIGKILL)
            await reader.close()
            await producer.close()
            await client.close()


async def until_received(s: Setup, due: dict[str, int]) -> None:
    await s.received.until(lambda got: set(due) <= {m.uniq_key for m in got}, WAIT_S)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP], ids=["crash", "down", "frozen"]
)
async def test_a_replica_gone_its_share_is_published_by_the_others(setup: Setup, sig: int) -> None:
    """Frozen: its connections stay open, so the brokers list it until their 120 s channel expiry; the
    others see its beats stop (app.dmq.beats). Before the beats, its share waited for that expiry."""
    r0, r1, r2 = await setup.start_all(copies=2)
    due = await setup.send(60, due_in_ms=15_000, spread_ms=2000)  # due after r0 is gone, however busy
    await setup.stored([r0, r1, r2], 60 * 2)  # two copies of each
    assert await metric(r0.port, "rocksidecar_delay_lateness_seconds_count") == 0, "r0 published already"
    if sig == signal.SIGSTOP:
        assert r0.proc is not None
        r0.proc.send_signal(sig)  # the fixture's SIGKILL ends it
    else:
        await r0.signal(sig)  # a third of the messages had r0 first in turn
    await until_received(setup, due)
    lateness = setup.check(due)
    # Before replication r0's share waited for r0 to come back (never, here). The bound is loose on
    # purpose (a shared CI machine): the measured p99 is the realbroker test's and bench's business.
    assert max(lateness) < 10.0
    took_over = sum([await metric(r.port, "rocksidecar_dmq_takeover_published_total") for r in (r1, r2)])
    assert took_over > 0  # r0 ranked first for some ids: someone published them in its place
    # The copies r1 and r2 both hold: the one that did not publish them dropped its own at the mark's due.
    await setup.until_sum([r1, r2], 'rocksidecar_dmq_mark_lookups{way="point"}', 1)


@pytest.mark.slow
async def test_a_lost_volume_is_rebuilt_from_the_topics(setup: Setup) -> None:
    r0, r1, r2 = await setup.start_all(copies=3)
    early = await setup.send(10, due_in_ms=300)  # published (and marked) before r0 loses its volume
    await until_received(setup, early)
    # Due well after r0's restart and convergence (seconds on a busy machine): r0 must hold them first.
    due = await setup.send(40, due_in_ms=30_000)
    await setup.stored([r0, r1, r2], 3 * 50)
    await r0.signal(signal.SIGKILL)
    shutil.rmtree(r0.data_dir)
    lost_ms = int(time.time() * 1000)  # devbroker stamps stored messages with this process's clock
    await r0.start()
    await r0.until("rocksidecar_dmq_converged", lambda v: v == 1)
    await r0.until("rocksidecar_delay_scheduled", lambda v: v == 40)  # the copies, not only new messages
    # The others gone: r0's rebuilt store alone publishes everything, and nothing of ``early`` again.
    await r1.signal(signal.SIGKILL)
    await r2.signal(signal.SIGKILL)
    await until_received(setup, due)
    setup.check({**early, **due})
    # r0 applied their marks while it converged: nothing of ``early`` is stored after its volume was
    # lost. Copies stored before that are take-over duplicates of the running replicas (on a machine
    # loaded past the 2 s beat timeout, seen publishing 7 of the 10 twice), the bounded window the
    # README states, not r0's doing.
    got = setup.received.got
    again = [m.uniq_key for m in got if m.uniq_key in early and m.store_timestamp_ms >= lost_ms]
    assert not again, f"published again after r0's volume was lost: {again}"


@pytest.mark.slow
async def test_a_lost_volume_past_the_inner_topics_retention_is_rebuilt_from_refreshed_copies(
    setup: Setup,
) -> None:
    """Retention deleted the inner messages the replicas stored (devbroker's expire endpoint, as a
    broker deleting old commit-log files), then r0 loses its volume: it finds its copies on the inner
    topic again because their publisher writes them there each --refresh-after-s (app.dmq.refresh).
    Before the refresh, r0 came back empty and the messages were left in the other replicas only.

    Retention deletes what is older than the refreshes written since (the README's rule: refresh_after
    below the retention), so it expires the offsets below where the queues ended once the copies were
    stored. Expiring the refreshes too would leave r0 only those written between the expiry and its start:
    on a busy machine none (seen in CI)."""
    rs = [setup.replica(n, 3) for n in NAMES]
    for r in rs:
        r.args = ("--refresh-after-s", "1")
    r0, r1, r2 = rs
    await asyncio.gather(*(r.start() for r in rs))
    for r in rs:
        await r.until("rocksidecar_dmq_publishers", lambda v: v == len(NAMES))
    due = await setup.send(30, due_in_ms=45_000)  # after r0's restart, however busy the machine
    await setup.stored(rs, 3 * 30)
    brokers = setup.cluster.brokers
    originals_end = {(b, q): brokers[b].store.max_offset(INNER_TOPIC, q) for b in brokers for q in range(4)}
    # Each copy is refreshed once a second by its publisher: 60 refreshes span two of its marks.
    refreshed = sum([await metric(r.port, "rocksidecar_dmq_refreshed_total") for r in rs])
    await setup.until_sum(rs, "rocksidecar_dmq_refreshed_total", refreshed + 2 * 30)
    await r0.signal(signal.SIGKILL)
    shutil.rmtree(r0.data_dir)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_app(brokers)), base_url="http://admin"
    ) as admin:
        for (broker, queue), end in originals_end.items():
            url = f"/brokers/{broker}/topics/{INNER_TOPIC}/queues/{queue}/expire"
            assert (await admin.post(url, params={"before": end})).status_code == 200
    await r0.start()
    await r0.until("rocksidecar_dmq_converged", lambda v: v == 1)
    await r0.until("rocksidecar_delay_scheduled", lambda v: v == 30)  # its copies, back
    await r1.signal(signal.SIGKILL)  # the others gone: r0's copies alone publish everything
    await r2.signal(signal.SIGKILL)
    await until_received(setup, due)
    setup.check(due)


@pytest.mark.slow
async def test_a_broker_down_the_stored_copies_are_still_published(setup: Setup) -> None:
    r0, r1, r2 = await setup.start_all(copies=2)
    due = await setup.send(40, due_in_ms=3000)
    await setup.stored([r0, r1, r2], 40 * 2)
    await setup.cluster.brokers["broker-b"].close()  # half of the inner queues, and their marks
    await until_received(setup, due)
    setup.check(due)


@pytest.mark.slow
async def test_the_name_server_down_changes_nothing(setup: Setup) -> None:
    r0, r1, r2 = await setup.start_all(copies=2)
    # A replica learns a real topic's route at its first publish there: as any RocketMQ client, it
    # cannot learn one while the name server is down. These give every replica the route first.
    warm = await setup.send(30, due_in_ms=200)
    await until_received(setup, warm)
    for r in (r0, r1, r2):
        await r.until('rocksidecar_dmq_marks_sent_total{outcome="sent"}', lambda v: v > 0)
    due = await setup.send(40, due_in_ms=3000)
    # A replica slow to read the inner topic (a busy machine) can read a warm copy's published mark
    # first: it keeps a marker and counts the copy a duplicate when it comes, never "scheduled".
    await setup.stored([r0, r1, r2], 70 * 2, outcomes=("scheduled", "duplicate"))
    await setup.cluster.namesrv.stop()  # routes are cached; presence asks the brokers
    await r2.signal(signal.SIGKILL)  # and a take-over still works
    await until_received(setup, due)
    setup.check(due)


async def test_a_split_member_view_duplicates_but_loses_nothing(setup: Setup) -> None:
    """The worst split: each replica sees only itself as a publisher (here: each asks its own group, as
    if each reached a broker the other does not). Both publish what they hold; none is lost, none goes
    out more than twice, and each duplicate is counted by the marks."""
    r0, r1 = setup.replica("r0", 3), setup.replica("r1", 3)
    r0.group, r1.group = f"{GROUP}_a", f"{GROUP}_b"
    await asyncio.gather(r0.start(), r1.start())
    for r in (r0, r1):
        await r.until("rocksidecar_dmq_publishers", lambda v: v == 1)
    due = await setup.send(20, due_in_ms=2000)
    await setup.stored([r0, r1], 2 * 20)
    await until_received(setup, due)
    setup.check(due)
    ids = setup.received.ids()
    doubled = sum(ids.count(i) - 1 for i in due)
    assert all(ids.count(i) <= 2 for i in due)
    seen = 0.0
    async with asyncio.timeout(WAIT_S):
        while seen < doubled:
            seen = sum(
                [await metric(r.port, 'rocksidecar_dmq_marks_total{outcome="duplicate"}') for r in (r0, r1)]
            )
            await asyncio.sleep(0.05)
    # Each double publish was counted (whether one happens depends on whose mark arrives first).
    assert seen >= doubled
