"""Replicated Rock-DMQ (issue 28) on real RocketMQ 4.9.4: 2 copies against 1 copy, in one run, one
configuration after the other (ABBA with --rounds 2). Results: bench/RESULTS.md, "Rock-DMQ copies".

    .venv/bin/python -m bench.dmq_copies [--namesrv 127.0.0.1:9876] [--replicas 3] [--pending 1000000]
                                         [--rate 2000] [--steady-s 20] [--burst 100000] [--rounds 1]
                                         [--lead-s S] [--only 1|2] [--profile DIR] [--stalls] [--quick]

--quick: 100 000 pending, 8 s steady, a burst of 10 000. --lead-s: the time from the first send to the
first due time (default 20 s + 0.5 ms per inner message, as bench.dmq); the bench prints how long before
the steady phase every replica had read everything (a negative margin means the lateness includes the
intake). --profile DIR: py-spy each replica over the measured window (raw stacks, one file each).
--stalls: time each replica's event loop from a thread (bench.stalls) and print, for the steady phase,
how long the loops stalled, how much of it their thread ran, and how busy the machine was meanwhile.

Each configuration runs `--replicas` `rocksidecar dmq` processes in replicated mode (--replicas with every
name, --copies 1 or 2) on topics of its own (prefix dmqbench_). As bench.dmq:
pending  messages due tomorrow, written once into a template store and copied into every replica's store
         before it starts: each replica holds all of them (more than its share, 1/3 or 2/3 of them with 3
         replicas), the same stores for both configurations; they are never touched during the run.
steady   inner messages falling due at `--rate`/s for `--steady-s` s (sent to the inner topic ahead).
burst    `--burst` inner messages all due in the same millisecond, 2 s after the steady phase.
Lateness: the broker's store timestamp of the published message minus its due time (DELAY_DUE_AT).
CPU per message: user + system time of every replica process (/proc), from all ready (converged) to
every message published and every other copy dropped (the replicas' pending count back to the preload),
divided by the inner messages sent; "intake" is the part until every replica had read them all.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bench import stalls
from bench.common import (
    add_options,
    create_topics,
    free_port,
    percentile,
    rotated,
    scratch_dir,
    tree_cpu_seconds,
    wait_for_http,
)
from bench.dmq import preload, read_lateness, send_inner, start_replica, summary
from bench.stalls import MachineCpu, busy_share, child_env, cpu_times
from rocksidecar.app.dmq.defaults import presence_topic
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.producer import Producer, ProducerConfig

PREFIX = "dmqbench"
CPU_TARGET, P99_TARGET_MS, BURST_TARGET_S = 1.6, 50.0, 10.0
IDLE_S = 3.0  # CPU of the ready replicas with nothing to do (beats, member lists), per second
PICK_KINDS = ("scanned", "rescanned", "reasked", "gated_max", "forgotten")  # rocksidecar_dmq_pick_keys
# rocksidecar_dmq_stage_seconds: the scheduler's stages, the other copies' drops, the loop's lag
STAGES = ("pass", "slot_wait", "record_cap", "publish", "record", "wake", "drop", "loop_lag")


@dataclass
class Outcome:
    copies: int
    sent: int
    cpu_s: float  # all replicas, ready -> settled
    intake_cpu_s: float  # ready -> every replica read every inner message
    idle_cpu_per_s: float
    window_s: float  # wall time of the cpu_s measurement
    intake_margin_s: float  # steady start - intake done (negative: the steady phase began first)
    steady: list[int]
    picked: list[int]
    burst_drain_s: float  # the last burst message stored, after its due time
    duplicates: int
    settle_s: float  # the last message stored -> every other copy dropped
    replicas: list[str]  # per replica: take-overs, silences, beats (see Replicas.health)

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.sent * 1e6

    @property
    def net_cpu_us(self) -> float:
        """Less what the replicas spend idle over the same time (beats, member lists, housekeeping)."""
        return (self.cpu_s - self.idle_cpu_per_s * self.window_s) / self.sent * 1e6

    @property
    def p99(self) -> float:
        return percentile(sorted(self.steady), 99)


class Replicas:
    """The configuration's replica processes and their /metrics."""

    def __init__(self, args: argparse.Namespace, root: Path, tag: str, copies: int) -> None:
        self.names = [f"{tag}-r{i}" for i in range(args.replicas)]
        self.ports = [free_port() for _ in self.names]
        self.copies, self.root, self.args, self.tag = copies, root, args, tag
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stall_dir = root / "stalls" if args.stalls else None

    def start(self, inner_topic: str, marks_topic: str) -> None:
        env = {"ROCKSIDECAR_DMQ_REPLICAS": ",".join(self.names), "ROCKSIDECAR_DMQ_COPIES": str(self.copies),
               "ROCKSIDECAR_DMQ_MARKS_TOPIC": marks_topic}  # fmt: skip
        if self.stall_dir is not None:
            env |= child_env(self.stall_dir)
        self.procs = [
            start_replica(
                self.args.namesrv,
                self.root / name,
                inner_topic,
                f"{self.tag}_g",
                f"127.0.0.1:{port}",
                ROCKSIDECAR_DMQ_INSTANCE=name,
                **env,
            )
            for name, port in zip(self.names, self.ports, strict=True)
        ]

    async def ready(self, timeout_s: float) -> None:
        for proc, port in zip(self.procs, self.ports, strict=True):
            if not await asyncio.to_thread(wait_for_http, f"http://127.0.0.1:{port}/readyz", proc, timeout_s):
                raise RuntimeError(f"replica on port {port} not ready (converged) in {timeout_s:.0f} s")

    def cpu_s(self) -> float:
        return sum(tree_cpu_seconds(p.pid) for p in self.procs)

    async def metric(self, http: httpx.AsyncClient, name: str) -> list[float]:
        """Each replica's sum of the samples of ``name``."""
        sums = []
        for port in self.ports:
            text = await self._scrape(http, port)
            sums.append(sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                            if s.name == name))  # fmt: skip
        return sums

    @staticmethod
    async def _scrape(http: httpx.AsyncClient, port: int) -> str:
        """One replica's /metrics. Asked again once on a connection error: on a busy machine a pooled
        connection that the replica's server closed while idle (the intake takes minutes) fails the next
        request with a ReadError (it failed two runs, 2026-11-27 13:40 and 13:47, load 10-16)."""
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            return (await http.get(url)).text
        except httpx.TransportError:
            return (await http.get(url)).text

    async def until(self, http: httpx.AsyncClient, name: str, done: Callable[[list[float]], bool],
                    timeout_s: float) -> None:  # fmt: skip
        """Polling other processes' metrics: nothing to await."""
        values: list[float] = []
        try:
            async with asyncio.timeout(timeout_s):
                while not done(values := await self.metric(http, name)):  # noqa: ASYNC110 - another process
                    await asyncio.sleep(0.25)
        except TimeoutError:
            raise RuntimeError(f"{name} of the replicas still {values} after {timeout_s:.0f} s") from None

    async def health(self, http: httpx.AsyncClient, marks: list[list[StageSnapshot]]) -> list[str]:
        """Per replica, what decided who publishes: publishes in place of a silent first holder, marks of
        ids it published too, silences (its own beats, a peer's), and its beats' timing: the longest
        interval between two beats of one sender and the longest delay from send to read, as histogram
        bucket bounds (and how many beats of either were over 1 s). Then the stages of picking and
        publishing in the steady phase and from the burst on (``marks``: the stages at the start of each)."""
        lines = []
        for i, (name, port) in enumerate(zip(self.names, self.ports, strict=True)):
            text = await self._scrape(http, port)
            m = [s for f in text_string_to_metric_families(text) for s in f.samples]
            lines.append(
                f"{name}: take-overs {_value(m, 'rocksidecar_dmq_takeover_published_total'):.0f}, "
                f"duplicate marks {_value(m, 'rocksidecar_dmq_marks_total', outcome='duplicate'):.0f}, "
                f"silences self {_value(m, 'rocksidecar_dmq_silences_total', who='self'):.0f} / peer "
                f"{_value(m, 'rocksidecar_dmq_silences_total', who='peer'):.0f}; beat interval "
                f"{_over(m, 'rocksidecar_dmq_beat_interval_seconds')}; beat delay "
                f"{_over(m, 'rocksidecar_dmq_beat_delay_seconds')}; pick keys "
                + " / ".join(f"{k} {_value(m, 'rocksidecar_dmq_pick_keys', kind=k):.0f}" for k in PICK_KINDS)
            )
            steady, burst = marks[0][i], marks[1][i]
            lines.append("  steady stages (n, total s, mean / p99 / max ms): " + _stage_line(burst, steady))
            lines.append("  burst stages: " + _stage_line(_stages(m), burst))
        return lines

    async def stages(self, http: httpx.AsyncClient) -> list[StageSnapshot]:
        """Each replica's rocksidecar_dmq_stage_seconds now."""
        snaps = []
        for port in self.ports:
            text = await self._scrape(http, port)
            snaps.append(_stages([s for f in text_string_to_metric_families(text) for s in f.samples]))
        return snaps

    def profile(self, into: Path | None) -> list[subprocess.Popen[bytes]]:
        """py-spy sampling each replica (--profile DIR): raw stacks into DIR, one file per replica."""
        if into is None:
            return []
        into.mkdir(parents=True, exist_ok=True)
        spy = Path(sys.executable).with_name("py-spy")
        return [
            subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(p.pid),
                    "--rate",
                    "50",
                    "--nonblocking",
                    "--format",
                    "raw",
                    "-o",
                    str(into / f"{self.copies}copies-{name}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for p, name in zip(self.procs, self.names, strict=True)
        ]

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            p.wait()


def _value(samples: list[Sample], metric: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == metric and labels.items() <= s.labels.items())


def _over(samples: list[Sample], hist: str) -> str:
    """A histogram's largest bucket bound reached, and how many observations were over 1 s."""
    buckets = sorted((float(s.labels["le"]), s.value) for s in samples if s.name == f"{hist}_bucket")
    total = buckets[-1][1] if buckets else 0
    top = next((le for le, n in buckets if n >= total), 0.0)
    late = total - next((n for le, n in buckets if le == 1.0), total)
    return f"max <= {top:g} s, {late:.0f} of {total:.0f} over 1 s"


StageSnapshot = dict[str, tuple[list[tuple[float, float]], float]]  # stage -> ((le, count) buckets, sum)


def _stages(samples: list[Sample]) -> StageSnapshot:
    name = "rocksidecar_dmq_stage_seconds"
    snap: StageSnapshot = {}
    for stage in STAGES:
        buckets = sorted((float(s.labels["le"]), s.value) for s in samples
                         if s.name == f"{name}_bucket" and s.labels.get("stage") == stage)  # fmt: skip
        snap[stage] = (buckets, _value(samples, f"{name}_sum", stage=stage))
    return snap


def _stage_line(snap: StageSnapshot, base: StageSnapshot | None = None) -> str:
    """Per stage of ``snap`` less ``base``: how many, their total, mean, and the bucket bounds holding the
    99th percentile and the largest."""
    parts = []
    for stage in STAGES:
        buckets, total = snap.get(stage, ([], 0.0))
        if base is not None and stage in base:
            old = dict(base[stage][0])
            buckets = [(le, c - old.get(le, 0.0)) for le, c in buckets]
            total -= base[stage][1]
        n = buckets[-1][1] if buckets else 0
        if not n:
            parts.append(f"{stage} n 0")
            continue
        p99 = next(le for le, c in buckets if c >= 0.99 * n)
        top = next(le for le, c in buckets if c >= n)
        mean_ms = total / n * 1000
        parts.append(f"{stage} n {n:.0f}, {total:.2f} s, {mean_ms:.1f} / {p99 * 1000:g} / {top * 1000:g}")
    return "; ".join(parts)


def link_sst(src: str, dst: str) -> None:
    """RocksDB never changes an SST file once written: link those (a million pending take hundreds of
    MB), copy the rest (the WAL, the manifest, the LOCK that each store's process locks)."""
    if src.endswith(".sst"):
        os.link(src, dst)
    else:
        shutil.copy2(src, dst)


async def run_one(args: argparse.Namespace, copies: int, template: Path) -> Outcome:
    tag = f"{PREFIX}{copies}_{secrets.token_hex(3)}"
    inner_topic, real_topic, marks_topic = f"{tag}_inner", f"{tag}_real", f"{tag}_marks"
    root = Path(tempfile.mkdtemp(prefix="bench-dmq-copies-"))
    replicas = Replicas(args, root, tag, copies)
    machine = MachineCpu() if args.stalls else None
    client = RemotingClient()
    ns = NameServerClient(client, args.namesrv)
    await create_topics(
        BrokerApi(client), ns, [inner_topic, real_topic, marks_topic, presence_topic(marks_topic)]
    )
    for name in replicas.names:
        shutil.copytree(template, root / name, copy_function=link_sst)
    print(f"[{copies} copies] {len(replicas.names)} stores of {args.pending} pending each", flush=True)
    producer = Producer(ns, BrokerApi(client), ProducerConfig(send_timeout_s=15.0))  # a busy broker
    await producer.start()
    lateness, reader = await read_lateness(args.namesrv, f"{tag}_reader", real_topic)
    http = httpx.AsyncClient(timeout=30)
    replicas.start(inner_topic, marks_topic)
    try:
        await replicas.ready(120)
        spies = replicas.profile(args.profile)
        if machine is not None:
            machine.start()
        cpu0 = replicas.cpu_s()
        await asyncio.sleep(IDLE_S)  # the idle replicas' own cost, for reading the per-message figure
        idle = (replicas.cpu_s() - cpu0) / IDLE_S
        cpu0, t0 = replicas.cpu_s(), time.monotonic()
        steady_n = args.rate * args.steady_s
        sent = lateness.expected = steady_n + args.burst
        # as bench.dmq: every replica reads every inner message before the first is due (2 000/s each)
        lead_ms = int(args.lead_s * 1000) if args.lead_s else 20_000 + sent // 2
        steady_start = time.time_ns() // 1_000_000 + lead_ms
        steady = [steady_start + i * 1000 // args.rate for i in range(steady_n)]
        burst_due = steady_start + args.steady_s * 1000 + 2000
        await send_inner(producer, inner_topic, real_topic, steady)
        await send_inner(producer, inner_topic, real_topic, [burst_due] * args.burst)
        await replicas.until(http, "rocksidecar_dmq_inner_messages_total", lambda v: min(v) >= sent,
                             max(burst_due / 1000 - time.time(), 0) + 300)  # fmt: skip
        intake_cpu = replicas.cpu_s() - cpu0
        margin = steady_start / 1000 - time.time()
        print(f"[{copies} copies] {sent} inner messages sent and read by every replica; steady phase starts "
              f"in {margin:.1f} s", flush=True)  # fmt: skip
        # The stages as they stand when the steady phase starts and before the burst (wall-clock times).
        await asyncio.sleep(max(steady_start / 1000 - 0.1 - time.time(), 0))
        stage_marks = [await replicas.stages(http)]
        phase_cpu = [(replicas.cpu_s(), time.monotonic())]
        machine_cpu = [cpu_times()]
        await asyncio.sleep(max(burst_due / 1000 - 0.3 - time.time(), 0))
        stage_marks.append(await replicas.stages(http))
        phase_cpu.append((replicas.cpu_s(), time.monotonic()))
        machine_cpu.append(cpu_times())
        async with asyncio.timeout(max(burst_due / 1000 - time.time(), 0) + 300):
            while len(lateness.ids) < lateness.expected:
                lateness.done.clear()
                await lateness.done.wait()
        t = time.monotonic()
        stored = args.pending * len(replicas.names)
        await replicas.until(http, "rocksidecar_delay_scheduled", lambda v: sum(v) <= stored, 60)
        settle = time.monotonic() - t
        cpu, window = replicas.cpu_s() - cpu0, time.monotonic() - t0
        health = await replicas.health(http, stage_marks)
        phase_cpu.append((replicas.cpu_s(), time.monotonic()))
        machine_cpu.append(cpu_times())
        shares = itertools.starmap(busy_share, itertools.pairwise(machine_cpu))
        phases = [
            f"{c1 - c0:.1f} over {t1 - t0:.1f} (the machine {busy:.0%} busy, {steal:.0%} steal)"
            for ((c0, t0), (c1, t1)), (busy, steal) in zip(itertools.pairwise(phase_cpu), shares, strict=True)
        ]
        health.append(
            "CPU of all replicas (s over s of wall time): steady phase " + ", from the burst on ".join(phases)
        )
        if replicas.stall_dir is not None and machine is not None:
            start_s = steady_start / 1000
            health += stalls.report(replicas.stall_dir, start_s, start_s + args.steady_s, machine)
        for spy in spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
            spy.wait()
    finally:
        if machine is not None:
            machine.stop()
        replicas.stop()
        await http.aclose()
        await reader.close()
        await producer.close()
        await client.close()
        shutil.rmtree(root, ignore_errors=True)
    burst = lateness.by_due.get(burst_due, [])
    return Outcome(
        copies, sent, cpu, intake_cpu, idle, window, margin,
        [x for d, v in lateness.by_due.items() if d != burst_due for x in v],
        [x for d, v in lateness.picked.items() if d != burst_due for x in v],
        max(burst, default=0) / 1000, lateness.count - len(lateness.ids), settle, health,
    )  # fmt: skip


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(args: argparse.Namespace, outcomes: list[Outcome]) -> None:
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nRock-DMQ replicated mode, {args.replicas} replicas, {args.pending} pending, steady "
          f"{args.rate}/s for {args.steady_s} s, burst {args.burst}, RocketMQ 4.9.4 ({args.namesrv}); "
          f"load average {load}")  # fmt: skip
    for o in outcomes:
        show(args, o)
    if {o.copies for o in outcomes} == {1, 2}:
        ratios(outcomes)


def show(args: argparse.Namespace, o: Outcome) -> None:
    print(f"  {o.copies} cop{'y' if o.copies == 1 else 'ies'}: CPU {o.cpu_us:.0f} us/msg, {o.net_cpu_us:.0f} "
          f"net of idle (intake {o.intake_cpu_s / o.sent * 1e6:.0f}; idle {o.idle_cpu_per_s * 100:.0f} % "
          f"of a core over {o.window_s:.0f} s); "
          f"intake done {o.intake_margin_s:.1f} s before the steady start; duplicates {o.duplicates}; "
          f"other copies dropped {o.settle_s:.1f} s after the last publish")  # fmt: skip
    print("    " + summary("steady", o.steady))
    print("      " + summary("due -> picked", o.picked))
    print(f"    burst of {args.burst}: all stored {o.burst_drain_s:.2f} s after their due time")
    for line in o.replicas:
        print("    " + line)


def ratios(outcomes: list[Outcome]) -> None:
    by = {c: [o for o in outcomes if o.copies == c] for c in (1, 2)}
    cpu = {c: statistics.median(o.cpu_us for o in by[c]) for c in by}
    net = {c: statistics.median(o.net_cpu_us for o in by[c]) for c in by}
    ratio = cpu[2] / cpu[1]
    p99 = {c: statistics.median(o.p99 for o in by[c]) for c in by}
    drain = {c: statistics.median(o.burst_drain_s for o in by[c]) for c in by}
    print(f"  CPU per message, 2 copies / 1 copy: {cpu[2]:.0f} / {cpu[1]:.0f} us = {ratio:.2f}x "
          f"(target <= {CPU_TARGET}x: {verdict(ratio <= CPU_TARGET)}); net of idle "
          f"{net[2]:.0f} / {net[1]:.0f} us = {net[2] / net[1]:.2f}x")  # fmt: skip
    for c in (1, 2):
        name = "1 copy" if c == 1 else f"{c} copies"
        print(f"  {name}: steady p99 {p99[c]:.0f} ms = {p99[c] / P99_TARGET_MS:.2f}x of the "
              f"{P99_TARGET_MS:.0f} ms target ({verdict(p99[c] <= P99_TARGET_MS)}); burst drained in "
              f"{drain[c]:.2f} s = {drain[c] / BURST_TARGET_S:.2f}x of the {BURST_TARGET_S:.0f} s target "
              f"({verdict(drain[c] <= BURST_TARGET_S)})")  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    order = [c for r in range(args.rounds) for c in rotated((1, 2), r)]
    if args.only:
        order = [c for c in order if c == args.only]
    with scratch_dir(None, "bench-dmq-copies-") as template:
        t = time.monotonic()
        await preload(
            template, [new_uniq_id() for _ in range(args.pending)], int(time.time() * 1000) + 86_400_000
        )
        print(f"preloaded {args.pending} pending in {time.monotonic() - t:.1f} s", flush=True)
        outcomes = []
        for copies in order:
            outcomes.append(await run_one(args, copies, template))
            show(args, outcomes[-1])  # as it comes: a later failure leaves this one shown
    report(args, outcomes)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--namesrv", default=os.environ.get("ROCKSIDECAR_TEST_NAMESRV", "127.0.0.1:9876"))
    add_options(p, replicas=3, pending=1_000_000, rate=2000, steady_s=20, burst=100_000, rounds=1, lead_s=0.0)
    p.add_argument("--profile", type=Path, metavar="DIR", help="py-spy each replica from ready to settled")
    p.add_argument("--stalls", action="store_true", help="time the replicas' loops: where the tail goes")
    p.add_argument("--only", type=int, choices=(1, 2), help="run only this many copies (to profile one)")
    p.add_argument("--quick", action="store_true", help="100 000 pending, 8 s steady, a burst of 10 000")
    args = p.parse_args(argv)
    if args.quick:
        args.pending, args.steady_s, args.burst = 100_000, 8, 10_000
    if args.replicas < 2 or args.rounds < 1:
        p.error("--replicas: at least 2 (2 copies); --rounds: at least 1")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
