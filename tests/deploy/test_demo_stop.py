"""`make stop` (tools/stop.sh): a process that will not stop keeps its pid file and fails the command."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.deploy.paths import REPO

STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(60)"
)
OBEDIENT = "import time; print('up', flush=True); time.sleep(60)"


def started(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"  # its handler is in place
    # reaped as soon as it ends, as init reaps the demo's processes: a zombie would still answer kill -0
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def stop(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tools").mkdir(exist_ok=True)
    shutil.copy(REPO / "tools" / "stop.sh", tmp_path / "tools" / "stop.sh")
    env = {**os.environ, "STOP_WAIT_TENTHS": "3"}
    return subprocess.run(
        ["bash", str(tmp_path / "tools" / "stop.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_process_that_ignores_sigterm_keeps_its_pid_file(tmp_path: Path) -> None:
    proc = started(STUBBORN)
    try:
        (tmp_path / ".run").mkdir()
        (tmp_path / ".run" / "sidecar.pid").write_text(str(proc.pid))
        done = stop(tmp_path)
        assert done.returncode == 1
        assert f"sidecar (pid {proc.pid}) is still running" in done.stderr
        assert (tmp_path / ".run" / "sidecar.pid").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_stopped_process_loses_its_pid_file(tmp_path: Path) -> None:
    proc = started(OBEDIENT)
    (tmp_path / ".run").mkdir()
    (tmp_path / ".run" / "devbroker.pid").write_text(str(proc.pid))
    done = stop(tmp_path)
    proc.wait()
    assert done.returncode == 0 and "stopped devbroker" in done.stdout
    assert not (tmp_path / ".run" / "devbroker.pid").exists()
