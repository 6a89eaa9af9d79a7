"""The real sidecar (`rocksidecar serve`) as a subprocess on free loopback ports, pointed at a name
server or running its own embedded devbroker, for benchmarks and end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import rocksidecar
from bench.common import free_port, stop_process, wait_for_http

START_TIMEOUT_S = 60.0


class SidecarProcess(NamedTuple):
    url: str  # http://127.0.0.1:PORT
    proc: subprocess.Popen[bytes]


@contextlib.contextmanager
def sidecar_process(
    namesrv: str | None,
    data_dir: Path,
    *,
    ready_path: str = "/readyz",
    tree: Path | None = None,
    **settings: str,
) -> Iterator[SidecarProcess]:
    """The running sidecar once ``ready_path`` answers 200; ``namesrv`` None starts it with ``--devbroker``.
    ``settings``: extra ROCKSIDECAR_* variables without the prefix, e.g. BATCH_LIMIT="2000". Its
    output goes to data_dir/sidecar.log. ``tree``: another checkout whose .venv runs it (this one's
    when None)."""
    http_addr = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "ROCKSIDECAR_HTTP_ADDR": http_addr,
        "ROCKSIDECAR_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "ROCKSIDECAR_DATA_DIR": str(data_dir / "store"),
        "ROCKSIDECAR_LOG_LEVEL": "warning",
        **{f"ROCKSIDECAR_{k}": v for k, v in settings.items()},
    }
    if namesrv is not None:
        env["ROCKSIDECAR_NAMESRV"] = namesrv
    else:
        env.pop("ROCKSIDECAR_NAMESRV", None)
    # The code of ``tree``, or this process's own: a checkout whose .venv is another's (a symlink, as a
    # worktree for --baseline is set up) has that one's editable install, which a console script
    # resolves to the other checkout's code whatever its working directory; PYTHONPATH comes first.
    root = tree if tree is not None else Path(rocksidecar.__file__).parent.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root.resolve()), os.environ.get("PYTHONPATH")) if p)
    bin_dir = tree / ".venv" / "bin" if tree is not None else Path(sys.executable).parent
    exe = shutil.which("rocksidecar", path=str(bin_dir)) or "rocksidecar"
    log = data_dir / "sidecar.log"
    with open(log, "wb") as out:
        args = [exe, "serve"] if namesrv is not None else [exe, "serve", "--devbroker"]
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tree)
    url = f"http://{http_addr}"
    try:
        if not wait_for_http(f"{url}{ready_path}", proc, START_TIMEOUT_S):
            raise RuntimeError(f"the sidecar did not become ready:\n{log.read_text()[-3000:]}")
        yield SidecarProcess(url, proc)
    finally:
        stop_process(proc, 30)
