"""`make run` (tools/demo.sh) checks every port it needs before it starts anything, and stops with one
line naming a port in use, what the demo needs it for, what holds it and what to do; tools/check_ports.py
does the check. No test here starts the demo."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from tests.deploy.paths import REPO

DEMO = REPO / "tools" / "demo.sh"


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPO / "tools" / "check_ports.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def test_a_port_in_use_is_one_line_naming_it_its_use_and_its_holder() -> None:
    with _listening() as held:
        port = held.getsockname()[1]
        result = _check(f"{port}=the sidecar's HTTP API")
    assert result.returncode == 1 and result.stdout == ""
    line = f"make run: port {port} (the sidecar's HTTP API) is in use by pid {os.getpid()} ("
    assert result.stderr.startswith(line) and result.stderr.count("\n") == 1, result.stderr
    assert f"run `make stop` if an earlier `make run` started it, else kill {os.getpid()}" in result.stderr


def test_malformed_arguments_exit_2() -> None:
    for args in ([], ["9880"], ["70000=x"], ["x=y"], ["9880="]):
        result = _check(*args)
        assert result.returncode == 2 and result.stderr.startswith("check_ports: "), (args, result.stderr)


def _demo_ports() -> list[int]:
    text = DEMO.read_text()
    block = re.search(r"^PORTS=\((.*?)^\)", text, re.MULTILINE | re.DOTALL)
    assert block, "tools/demo.sh no longer lists its ports in PORTS=( ... )"
    return [int(p) for p in re.findall(r'"(\d+)=', block.group(1))]


def test_the_demo_checks_every_port_it_uses_before_starting_anything() -> None:
    text = DEMO.read_text()
    used = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", text)}
    used |= {int(p) for p in re.findall(r"--(?:namesrv|admin)-port (\d+)", text)}
    used |= {int(p) for p in re.findall(r"echo_app\.py (\d+)", text)}
    base = re.search(r"--broker-base-port (\d+)", text)
    assert base, "the demo no longer gives devbroker --broker-base-port"
    used |= {int(base.group(1)), int(base.group(1)) + 10}  # broker-a and broker-b (devbroker's step is 10)
    assert used == set(_demo_ports())
    check = text.index("tools/check_ports.py")
    assert check < text.index("&\n"), "the check must run before the first process starts"


def test_the_demo_stops_on_a_held_port_before_starting_anything(tmp_path: Path) -> None:
    """The real demo.sh in a copy of tools/ whose stop.sh does nothing (so no running demo is stopped)."""
    (tmp_path / "tools").mkdir()
    shutil.copy(DEMO, tmp_path / "tools" / "demo.sh")
    shutil.copy(REPO / "tools" / "check_ports.py", tmp_path / "tools" / "check_ports.py")
    (tmp_path / "tools" / "stop.sh").write_text("exit 0\n")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    first = _demo_ports()[0]  # the first port in use is the one named: hold the first
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no hold
        try:
            held.bind(("127.0.0.1", first))
            held.listen(1)
            holder = f"pid {os.getpid()} ("
        except OSError:
            holder = ""  # something else holds it already: the demo must stop all the same
        result = subprocess.run(
            ["bash", str(tmp_path / "tools" / "demo.sh")],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"make run: port {first} (devbroker's name server) is in use by {holder}")
    assert sorted(p.name for p in (tmp_path / ".run").iterdir()) == []  # nothing started, no pid file
