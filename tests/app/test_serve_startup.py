"""A second `rocksidecar serve` on an address or a store that a running sidecar holds prints one line
naming what is taken and exits 1, without a traceback (issue 17 item 9). And a name server that does not
answer does not keep `serve` from listening (/healthz answers, /readyz says why it is not ready)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from bench.common import free_port, wait_for_http
from bench.sidecar_process import SidecarProcess, sidecar_process
from tests.app.silent_namesrv import Process, silent_namesrv

pytestmark = pytest.mark.timeout(180)
EXE = shutil.which("rocksidecar", path=str(Path(sys.executable).parent)) or "rocksidecar"


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SidecarProcess, Path]]:
    data = tmp_path_factory.mktemp("first")
    with sidecar_process(None, data) as first:
        yield first, data / "store"  # sidecar_process sets ROCKSIDECAR_DATA_DIR to data/store


def second_serve(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ROCKSIDECAR_NAMESRV": "127.0.0.1:9",  # unreachable: start-up does not need it
        "ROCKSIDECAR_HTTP_ADDR": f"127.0.0.1:{free_port()}",
        "ROCKSIDECAR_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "ROCKSIDECAR_DATA_DIR": str(tmp_path / "data"),
        "ROCKSIDECAR_LOG_LEVEL": "warning",
        **{f"ROCKSIDECAR_{k}": v for k, v in settings.items()},
    }
    # a serve that did start would run until killed: the timeout turns that into a failure
    return subprocess.run([EXE, "serve"], env=env, capture_output=True, text=True, timeout=60, check=False)


def assert_one_line(out: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("rocksidecar serve: cannot start: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]


def test_http_port_in_use(running: tuple[SidecarProcess, Path], tmp_path: Path) -> None:
    taken = urlsplit(running[0].url).netloc
    out = second_serve(tmp_path, HTTP_ADDR=taken)
    assert_one_line(out, f"the HTTP API cannot listen on {taken}", "ROCKSIDECAR_HTTP_ADDR")


def test_grpc_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        out = second_serve(tmp_path, GRPC_ADDR=taken)
    assert_one_line(out, f"the gRPC API cannot listen on {taken}", "ROCKSIDECAR_GRPC_ADDR")


def test_store_held_by_another_sidecar(running: tuple[SidecarProcess, Path], tmp_path: Path) -> None:
    data_dir = running[1]
    out = second_serve(tmp_path, DATA_DIR=str(data_dir))
    assert_one_line(out, f"the store at {data_dir / 'store'} is held by another process")
    assert running[0].proc.poll() is None  # the first sidecar is untouched


def test_unusable_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = second_serve(tmp_path, DATA_DIR=str(blocker))
    assert_one_line(out, f"cannot open the store at {blocker / 'store'}")


def test_unanswering_name_server_does_not_hold_up_listening(tmp_path: Path) -> None:
    """With a name server that accepts and never answers, serve still listens at once (README: an
    unreachable name server is not fatal, /readyz says why). The allow-listed topics' routes are fetched
    all at once under one bounded wait (app.assembly SidecarParts._warm_routes): one request's timeout
    (3 s), where one after another, 10 topics kept /healthz down for 30 s."""
    topics = ",".join(f"T{i}" for i in range(10))
    with silent_namesrv() as namesrv, Process(tmp_path, NAMESRV=namesrv, TOPICS=topics) as serve:
        started = time.monotonic()
        up = wait_for_http(f"{serve.url}/healthz", serve.proc, 12)
        assert up, f"/healthz not answering {time.monotonic() - started:.1f} s after start"
        ready = httpx.get(f"{serve.url}/readyz", timeout=10)
        assert ready.status_code == 503, ready.text
        assert "no broker to send T0 to" in ready.json()["reason"], ready.text
