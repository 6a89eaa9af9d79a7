"""Shared benchmark plumbing: the Java anchor, a devbroker subprocess, percentiles and a results table."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient
from rocksidecar.rmq.producer import Producer, ProducerConfig

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CTL = REPO.parent / "shared" / "rocketmq" / "real-broker.sh"
T = TypeVar("T")


def bench_parser(doc: str | None, **defaults: object) -> argparse.ArgumentParser:
    """An argument parser that shows a benchmark's module docstring as its help, line breaks kept, with
    an option for each keyword (as ``add_options``)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_options(parser, **defaults)


def tools_or_exit(bench: str, tools: dict[str, str]) -> None:
    """Exit with one line naming what is missing: ``tools`` maps each command to its Debian package."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        packages = ", ".join(dict.fromkeys(tools[t] for t in missing))
        sys.exit(f"{bench} needs {' and '.join(missing)}: run `make bench-tools` (Debian: {packages})")


def add_options(parser: argparse.ArgumentParser, **defaults: object) -> argparse.ArgumentParser:
    """``--name-with-dashes`` for each keyword, typed by its default: False is a flag, None a string."""
    for name, default in defaults.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true")
        else:
            kind = str if default is None else type(default)
            parser.add_argument(flag, type=kind, default=default)
    return parser


async def bench_producer(
    namesrv: str, *, warm_topic: str | None = None, warm_body: bytes = b"warm-up", **settings: Any
) -> tuple[RemotingClient, Producer]:
    """A started producer of group "bench" and its client (close both); with ``warm_topic``, after 200
    sends to it (routes, connections, topic auto-creation on every broker), so none of that is measured."""
    client = RemotingClient()
    producer = Producer(
        NameServerClient(client, namesrv),
        BrokerApi(client, producer_group="bench"),
        ProducerConfig(group="bench", **settings),
    )
    await producer.start()
    if warm_topic is not None:
        for _ in range(200):
            await producer.send(Message(warm_topic, warm_body))
    return client, producer


async def create_topics(api: BrokerApi, ns: NameServerClient, topics: Sequence[str], queues: int = 4) -> None:
    """Each topic with ``queues`` queues on every broker (the ones auto-creating TBW102 lists), so no
    reader waits for a route refresh to find a second broker's queues."""
    template = await ns.get_route("TBW102")
    for topic in topics:
        for b in template.broker_datas:
            await api.create_topic(
                b.master_addr or "", topic, read_queue_nums=queues, write_queue_nums=queues
            )


@dataclass
class Row:
    name: str
    value: float
    unit: str
    anchor: float | None = None  # the figure this row is compared with, measured in the same run

    def line(self) -> str:
        ratio = f"{self.value / self.anchor:6.2f}x" if self.anchor else "       "
        digits = 2 if self.unit == "ms" else 1  # latencies below a millisecond
        return f"  {self.name:<66} {self.value:>12,.{digits}f} {self.unit:<6} {ratio}"


class Countdown:
    """A listener's or a publisher's tally: ``count`` what arrived; ``done`` is set once it reaches
    ``total``."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.done = asyncio.Event()

    def add(self, n: int) -> None:
        self.count += n
        if self.count >= self.total:
            self.done.set()


async def rate(count: int, inflight: int, one: Callable[[int], Awaitable[object]]) -> float:
    """Operations per second of ``count`` calls of ``one`` (given its index), ``inflight`` at a time."""
    per_second, _ = await rate_and_cpu(count, inflight, one)
    return per_second


async def rate_and_cpu(
    count: int, inflight: int, one: Callable[[int], Awaitable[object]]
) -> tuple[float, float]:
    """As ``rate``, and this process's CPU microseconds (user + system, every thread) per call."""
    sem = asyncio.Semaphore(inflight)

    async def bounded(i: int) -> None:
        async with sem:
            await one(i)

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(bounded(i) for i in range(count)))
    cpu_us = (time.process_time() - cpu) * 1e6 / count
    return count / (time.perf_counter() - started), cpu_us


def rotated(items: Sequence[T], r: int) -> list[T]:
    """Round ``r``'s order of ``items``: each goes first in turn (two swap every round), so that load
    drifting during a run hits them alike."""
    k = r % len(items)
    return [*items[k:], *items[:k]]


def print_rows(title: str, rows: Sequence[Row]) -> None:
    print(f"\n{title}")
    for row in rows:
        print(row.line())


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def printed(tool: str, pattern: str, out: str, flags: re.RegexFlag = re.NOFLAG) -> re.Match[str]:
    """The first match of ``pattern`` in what ``tool`` printed; RuntimeError with the output's tail when
    it printed none (it failed, or another version words its summary otherwise)."""
    match = re.search(pattern, out, flags)
    if match is None:
        raise RuntimeError(f"{tool} printed no result:\n{out[-2000:]}")
    return match


def java_benchmark(ctl: Path | str, cls: str, namesrv: str, topic: str, *args: str) -> list[str]:
    """The command that runs RocketMQ's benchmark class ``cls`` (Producer, Consumer, BatchProducer...)
    of the distribution behind ``ctl`` (real-broker.sh) against ``namesrv`` and ``topic``."""
    main_class = f"org.apache.rocketmq.example.benchmark.{cls}"
    return ["bash", str(ctl), "java", main_class, "-n", namesrv, "-t", topic, *args]


def java_producer_tps(
    namesrv: str, ctl: Path, *, topic: str, threads: int = 8, size: int = 256, quantity: int = 300_000
) -> float:
    """Run RocketMQ's own benchmark Producer (sync sends) and return its overall TPS."""
    cmd = java_benchmark(
        ctl, "Producer", namesrv, topic, "-w", str(threads), "-s", str(size), "-q", str(quantity)
    )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False).stdout
    found = printed("the Java benchmark producer", r"\[Complete\] Send Total: (\d+) Send TPS: (\d+)", out)
    return float(found[2])


def child_output(*args: str) -> str:
    """What ``python args`` (this interpreter, this checkout's code on PYTHONPATH) printed; it must exit 0."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True, env=env).stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class DevbrokerProcess:
    namesrv: str
    admin_url: str

    def faults(self, broker: str, **faults: object) -> None:
        """Set faults through the admin endpoint, e.g. faults("broker-a", fail_all=True, fail_code=1)."""
        httpx.post(f"{self.admin_url}/brokers/{broker}/faults", json=faults, timeout=10).raise_for_status()

    def clear(self, broker: str) -> None:
        httpx.delete(f"{self.admin_url}/brokers/{broker}/faults", timeout=10).raise_for_status()

    def act(self, broker: str, action: str) -> None:
        """stop, start or drop a broker through the admin endpoint."""
        httpx.post(f"{self.admin_url}/brokers/{broker}/{action}", timeout=10).raise_for_status()

    def stored_keys(self, topic: str) -> Counter[str]:
        """UNIQ_KEY -> how many times the brokers store it, for ``topic``."""
        return Counter(m["uniqKey"] for m in self.stored_listing(topic))

    def stored_listing(self, topic: str) -> list[dict[str, Any]]:
        """Every message the brokers store for ``topic`` as the admin endpoint lists it (uniqKey, broker,
        queueId, queueOffset, bodySize), every page of the listing."""
        listed: list[dict[str, Any]] = []
        while True:
            url = f"{self.admin_url}/topics/{topic}/messages"
            doc = httpx.get(url, params={"offset": len(listed)}, timeout=60).raise_for_status().json()
            listed.extend(doc["messages"])
            if not doc["messages"] or len(listed) >= doc["total"]:
                return listed


@contextlib.contextmanager
def devbroker_process(
    brokers: int = 2, queues: int = 4, max_log_mb: int = 2048, *, property_filter: bool = False
) -> Iterator[DevbrokerProcess]:
    """`rocksidecar devbroker` in its own process (so it has its own core)."""
    ns_port, admin_port = free_port(), free_port()
    exe = shutil.which("rocksidecar", path=str(Path(sys.executable).parent)) or "rocksidecar"
    proc = subprocess.Popen(
        [
            exe,
            "devbroker",
            "--brokers",
            str(brokers),
            "--queues",
            str(queues),
            "--namesrv-port",
            str(ns_port),
            "--broker-base-port",
            "0",
            "--admin-port",
            str(admin_port),
            "--max-log-mb",
            str(max_log_mb),
            *(["--enable-property-filter"] if property_filter else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        if not wait_for_http(f"http://127.0.0.1:{admin_port}/brokers", proc, 30.0):
            raise RuntimeError(f"devbroker did not start: {proc.stdout.read() if proc.stdout else ''}")
        yield DevbrokerProcess(f"127.0.0.1:{ns_port}", f"http://127.0.0.1:{admin_port}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def namesrv_or_devbroker(namesrv: str | None) -> Iterator[str]:
    """The given (real) name server, or else a devbroker of the benchmark's own for the block."""
    if namesrv:
        yield namesrv
        return
    with devbroker_process() as dev:
        yield dev.namesrv


def targets(namesrv: str | None, devbroker: bool) -> Iterator[tuple[str, str]]:
    """(label, name server) of each broker a benchmark measures: a real RocketMQ when ``namesrv`` is
    given, then a devbroker of its own (running while the loop's body runs) when ``devbroker``."""
    if namesrv:
        yield "real RocketMQ 4.9.4", namesrv
    if devbroker:
        with devbroker_process() as dev:
            yield "devbroker", dev.namesrv


@contextlib.contextmanager
def ready_module(module: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m module args`` as a subprocess of its own (as the sidecar is), yielded once it printed
    "ready" (a server listening); terminated on the way out."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{module} did not start (exit {proc.wait()})")
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def stop_process(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_http(url: str, proc: subprocess.Popen[Any], timeout_s: float) -> bool:
    """True once ``url`` answers 200; False if ``proc`` exits or the time runs out first."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return True
        time.sleep(0.1)  # waiting for another process to listen: nothing to await
    return False


_HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


@contextlib.contextmanager
def scratch_dir(given: Path | None, prefix: str, *, keep_given: bool = False) -> Iterator[Path]:
    """The benchmark's scratch directory: ``given``, or a new temporary one; removed at the end (a given
    one too unless ``keep_given``)."""
    root = given or Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        if given is None or not keep_given:
            shutil.rmtree(root, ignore_errors=True)


def environment() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = f"{os.cpu_count()} cores, load average {load:.2f}, Python {sys.version.split()[0]}"
    # A KVM guest's idle policy moves one-connection latency more than anything of ours (RESULTS.md):
    # with guest_halt_poll_ns at 0 an idle vCPU halts at once and each wake-up is slow.
    with contextlib.suppress(OSError):
        text += f", guest_halt_poll_ns {_HALT_POLL.read_text().strip()}"
    return text


def memory_kb(pid: int | str = "self") -> dict[str, int]:
    """The memory lines of /proc/PID/status (VmRSS, VmHWM, ...), in kB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: int(v) for k, v in re.findall(r"^(Vm\w+):\s+(\d+) kB$", text, re.M)}


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and every process under it, those that ended and were
    waited for included (/proc/PID/stat utime, stime, cutime, cstime): a JVM's Python workers, a
    launcher's java. A process that ends between two reads is missed."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
            total += sum(int(f) for f in fields[11:15])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # gone meanwhile
    return total / ticks


def straced(pid: int, options: Sequence[str], load: Callable[[], T]) -> tuple[T, str]:
    """Run ``load`` while ``strace -f`` with ``options`` is attached to ``pid`` (all its threads):
    ``load``'s result and the text strace wrote once it detached. Needs strace (tools_or_exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "strace.txt"
        tracer = subprocess.Popen(
            ["strace", "-f", *options, "-o", str(out), "-p", str(pid)], stderr=subprocess.DEVNULL
        )
        try:
            time.sleep(1.0)  # attached to every thread before the load starts
            result = load()
        finally:
            tracer.send_signal(signal.SIGINT)  # strace detaches (with -c: prints its table first)
            tracer.wait(timeout=120)
        return result, out.read_text()
