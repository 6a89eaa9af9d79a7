"""A proxy in front of the real sidecar that can answer 503 for a while, or forward a request and
then SIGKILL the process that sent it (a Spark task's Python worker) before it sees the answer."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

import httpx

from tests.pipeline.http_double import Reply, Request

FORWARDED = ("content-type", "idempotency-key", "authorization", "user-agent")


def peer_pid(peer_port: int, server_port: int) -> int:
    """The pid of the local process whose TCP socket goes from ``peer_port`` to ``server_port``."""
    inode = None
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.split(":")[1], 16) == peer_port and int(remote.split(":")[1], 16) == server_port:
                inode = fields[9]
    if inode is None:
        raise LookupError(f"no socket from port {peer_port} to {server_port}")
    target = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in fds):
                return int(pid)
        except OSError:
            continue  # gone, or not ours to look at
    raise LookupError(f"no process owns {target}")


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self._http = httpx.Client(base_url=upstream, timeout=60)
        self._lock = threading.Lock()
        self.keys: Counter[str] = Counter()  # Idempotency-Key -> requests seen
        self.unavailable = 0  # answer this many requests 503 (Retry-After: retry_after) first
        self.retry_after = "1"
        self.answered_503 = 0
        # key suffix -> how many more times a request whose key ends so is forwarded, then its sender killed
        self.kill_on: dict[str, int] = {}
        self.killed: list[int] = []

    def close(self) -> None:
        self._http.close()

    def __call__(self, req: Request) -> Reply | None:
        key = req.headers.get("idempotency-key", "")
        with self._lock:
            self.keys[key] += 1
            if self.unavailable > 0:
                self.unavailable -= 1
                self.answered_503 += 1
                return Reply(503, b'{"title":"scripted"}', {"Retry-After": self.retry_after})
            suffix = next((s for s, times in self.kill_on.items() if times > 0 and key.endswith(s)), None)
            kill = suffix is not None
            if suffix is not None:
                self.kill_on[suffix] -= 1
        headers = {k: v for k, v in req.headers.items() if k in FORWARDED}
        resp = self._http.request(req.method, req.path, params=req.query, content=req.body, headers=headers)
        if kill:
            pid = peer_pid(req.peer[1], req.server_port)
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)
            return None
        passed = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "retry-after")}
        return Reply(resp.status_code, resp.content, passed)
