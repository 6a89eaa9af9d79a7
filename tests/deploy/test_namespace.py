"""One top-level package (issue 27 item 14): the repository keeps app/, rmq/, retry/, ... at its top, and
the distribution installs them as rocksidecar.app, rocksidecar.rmq, ... only, so that a user's own
``app.py`` or the PyPI package ``retry`` neither shadows the sidecar's modules nor is overwritten."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.deploy.paths import REPO

FOLDERS = {"app", "rmq", "retry", "delay", "storage", "devbroker", "pipeline"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip_wheel, "-w", str(out), "."], cwd=REPO, check=True, timeout=300)
    (built,) = out.glob("rocksidecar-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_one_top_level_package(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"rocksidecar"}
    (top_level,) = (n for n in wheel.namelist() if n.endswith(".dist-info/top_level.txt"))
    assert wheel.read(top_level).decode().split() == ["rocksidecar"]
    installed = {name.split("/")[1] for name in wheel.namelist() if name.count("/") >= 2}
    assert installed == FOLDERS
    # every source file of the folders, through the links, and the proto with its generated modules
    for folder in FOLDERS:
        for source in (REPO / folder).rglob("*.py"):
            if "__pycache__" not in source.parts:
                assert f"rocksidecar/{source.relative_to(REPO)}" in wheel.namelist(), source
    assert "rocksidecar/app/api/proto/rocksidecar.proto" in wheel.namelist()


def test_the_command_keeps_its_name(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = (n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    assert "rocksidecar = rocksidecar.app.cli:main" in wheel.read(entry_points).decode()


def test_links_name_the_top_level_folders() -> None:
    for folder in FOLDERS:
        link = REPO / "rocksidecar" / folder
        assert link.is_symlink() and os.readlink(link) == f"../{folder}", link


def test_a_script_beside_its_own_app_and_retry_modules_reaches_the_sidecar(tmp_path: Path) -> None:
    """The README's gRPC snippet, run from a folder that holds the user's own app.py and retry.py."""
    (tmp_path / "app.py").write_text("raise SystemExit('the user app.py was imported')\n")
    (tmp_path / "retry.py").write_text("WHOSE = 'user'\n")
    (tmp_path / "client.py").write_text(
        "import retry\n"
        "from rocksidecar.app.api.proto import rocksidecar_pb2 as pb\n"
        "from rocksidecar.retry.store import RetryStore\n"
        "assert retry.WHOSE == 'user'\n"
        "request = pb.SendRequest(message=pb.Message(topic='Orders', body='x'))\n"
        "print(request.message.topic, RetryStore.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "client.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Orders", "RetryStore"]
