"""A name server that accepts connections and never answers (a hung or black-holed one), and a
`rocksidecar serve` or `rocksidecar dmq` process whose output is read line by line on a thread: what the
tests of the process lifecycle (start-up held by the name server, SIGTERM during it) run against."""

from __future__ import annotations

import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import free_port

EXE = shutil.which("rocksidecar", path=str(Path(sys.executable).parent)) or "rocksidecar"


@contextmanager
def silent_namesrv() -> Iterator[str]:
    """The address of a name server that accepts connections and never answers a request."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(128)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = hole.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{hole.getsockname()[1]}"
    finally:
        done.set()
        hole.close()
        for conn in held:
            conn.close()


class Process:
    """`rocksidecar <command>` with ROCKSIDECAR_* ``settings`` (without the prefix), its output (stdout and
    stderr) read line by line on a thread. ``http_addr``: where its HTTP API listens."""

    def __init__(self, tmp_path: Path, command: str = "serve", **settings: str) -> None:
        self.http_addr = f"127.0.0.1:{free_port()}"
        addr_var = "ROCKSIDECAR_DMQ_HTTP_ADDR" if command == "dmq" else "ROCKSIDECAR_HTTP_ADDR"
        env = {
            **os.environ,
            addr_var: self.http_addr,
            "ROCKSIDECAR_GRPC_ADDR": f"127.0.0.1:{free_port()}",
            "ROCKSIDECAR_DATA_DIR": str(tmp_path / "data"),
            "ROCKSIDECAR_LOG_LEVEL": "info",
            "ROCKSIDECAR_LOG_FORMAT": "text",
            **{f"ROCKSIDECAR_{k}": v for k, v in settings.items()},
        }
        self.proc = subprocess.Popen(
            [EXE, command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    @property
    def url(self) -> str:
        return f"http://{self.http_addr}"

    def wait_for_line(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            assert line is not None, "".join(self.output)
            if text in line:
                return

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
