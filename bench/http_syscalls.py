"""System calls per message of the sidecar's HTTP hot routes, and to whom its writes go (issue 32).

CPU time per message moves 2-4x between runs on a shared machine; the number of system calls a message
costs does not move with the load. Each tree's sidecar is driven by bench.compare's wrk loads (POST
/v1/messages over 32 connections, and batches of 100 over 8) while ``strace -f`` records every system
call of its process; the counts are divided by the messages the sidecar itself counted as sent (its
/metrics). Writes are split by peer: to the HTTP clients (the answers) and to the brokers (the sends),
and the coalescer's batches are shown (messages per broker batch made of single sends). strace slows
the process, and a slower process coalesces more per loop turn, so no rates or times are printed, and
only counts from the same run compare: run the trees side by side.

    .venv/bin/python -m bench.http_syscalls [--seconds 6] [TREE ...]    # needs strace and wrk
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.common import bench_parser, straced, tools_or_exit
from bench.compare import BODY, run_wrk
from bench.sidecar_process import sidecar_process
from tools.check_ports import tcp_sockets

WRITES = frozenset({"write", "writev", "send", "sendto", "sendmsg"})
READS = frozenset({"read", "readv", "recv", "recvfrom", "recvmsg"})
_CALL = re.compile(r"^\d+\s+(\w+)\((\d*)")  # "PID name(fd, ..." (not "<... name resumed>")
_METRIC = re.compile(
    r"^(rocksidecar_messages_total\{outcome=\"sent\"\}|rocksidecar_coalesced_\w+_total) (\S+)$", re.M
)


@dataclass
class Counted:
    messages: float
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    writes: collections.Counter[str] = field(default_factory=collections.Counter)  # by peer
    reads: collections.Counter[str] = field(default_factory=collections.Counter)
    batches: float = 0.0  # coalesced broker batches
    coalesced: float = 0.0  # messages in them

    def line(self, name: str) -> str:
        n = max(self.messages, 1.0)
        top = ", ".join(f"{k} {v / n:.2f}" for k, v in self.calls.most_common(7))
        per = f"{self.coalesced / self.batches:.1f}" if self.batches else "-"
        return (
            f"{name:<24} {int(self.messages):>8} msgs  {sum(self.calls.values()) / n:6.2f} calls/msg "
            f"({top})\n{'':<24} writes/msg to clients {self.writes['client'] / n:.3f}, to brokers "
            f"{self.writes['broker'] / n:.3f}; reads/msg from clients {self.reads['client'] / n:.3f}, "
            f"from brokers {self.reads['broker'] / n:.3f}; coalesced batches {int(self.batches)} "
            f"of {per} msgs"
        )


def _metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {name.split("{")[0]: float(value) for name, value in _METRIC.findall(text)}


def _inode_ports() -> dict[str, int]:
    """Socket inode -> local port, for every TCP socket of the host."""
    return {inode: port for inode, port, _state in tcp_sockets()}


def peers(pid: int, http_port: int) -> dict[int, str]:
    """The process's open fds: "client" (accepted on the HTTP port), "broker" (its own connections:
    brokers, and the name server's rare route queries) or "other" (event fds, files). Fds closed by now
    were wrk's connections."""
    ports = _inode_ports()
    out: dict[int, str] = {}
    fd_dir = Path(f"/proc/{pid}/fd")
    for entry in fd_dir.iterdir():
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        port = ports.get(target[8:-1]) if target.startswith("socket:[") else None
        out[int(entry.name)] = "other" if port is None else "client" if port == http_port else "broker"
    return out


def parse(text: str, fds: dict[int, str]) -> tuple[collections.Counter[str], ...]:
    calls: collections.Counter[str] = collections.Counter()
    writes: collections.Counter[str] = collections.Counter()
    reads: collections.Counter[str] = collections.Counter()
    for row in text.splitlines():
        m = _CALL.match(row)
        if m is None:
            continue
        name = m.group(1)
        calls[name] += 1
        if name in WRITES or name in READS:
            peer = fds.get(int(m.group(2)), "client") if m.group(2) else "other"
            (writes if name in WRITES else reads)[peer] += 1
    return calls, writes, reads


def counted(url: str, pid: int, path: str, body: bytes, connections: int, seconds: float) -> Counted:
    http_port = int(url.rsplit(":", 1)[1])

    def load() -> tuple[dict[str, float], dict[str, float], dict[int, str]]:
        before = _metrics(url)
        run_wrk(f"{url}{path}", body, connections, seconds)
        return before, _metrics(url), peers(pid, http_port)

    (before, after, fds), text = straced(pid, ["-qq"], load)
    calls, writes, reads = parse(text, fds)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    return Counted(
        delta("rocksidecar_messages_total"),
        calls,
        writes,
        reads,
        delta("rocksidecar_coalesced_batches_total"),
        delta("rocksidecar_coalesced_messages_total"),
    )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("trees", nargs="*", type=Path, help="checkouts with a .venv (default: this one)")
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="the real RocketMQ name server")
    parser.add_argument("--seconds", type=float, default=6.0, help="wrk's duration per path")
    args = parser.parse_args()
    tools_or_exit("bench.http_syscalls", {"strace": "strace", "wrk": "wrk"})
    topic = f"RsHttpSys{int(time.time())}"
    single = json.dumps({"topic": topic, "body": BODY}).encode()
    batch = json.dumps({"messages": [{"topic": topic, "body": BODY}] * 100}).encode()
    for tree in args.trees or [None]:
        with tempfile.TemporaryDirectory() as data, sidecar_process(args.namesrv, Path(data), tree=tree) as s:
            url, proc = s
            run_wrk(f"{url}/v1/messages", single, 8, 2)  # warm up: routes, connections; creates the topic
            name = str(tree or ".")
            print(counted(url, proc.pid, "/v1/messages", single, 32, args.seconds).line(f"{name} x32"))
            print(counted(url, proc.pid, "/v1/messages:batch", batch, 8, args.seconds).line(f"{name} batch"))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
