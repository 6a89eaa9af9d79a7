"""tools/image.sh refuses bad input before doing anything; tools/podman_setup.sh writes the
containers.conf drop-in this host needs, once (a second run changes nothing)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.deploy.paths import REPO

FAKE_PODMAN = '#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n'


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A PATH entry whose podman, docker and runc only record that they were called (so nothing gets
    installed either)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("podman", "docker", "runc"):
        (bin_dir / name).write_text(FAKE_PODMAN)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run(
    script: str, env: dict[str, str], *args: str, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, "bash", str(REPO / "tools" / script), *args],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"ENGINE": "lxc"}, "ENGINE must be docker or podman, not lxc"),
        ({"CA_BUNDLE": "/no/such/bundle.crt"}, "CA_BUNDLE=/no/such/bundle.crt is not a file"),
        ({"ENGINE": "docker", "CA_BUNDLE": "/etc/hostname"}, "CA_BUNDLE works with podman only"),
    ],
)
def test_image_refuses_bad_input_with_one_line_and_runs_nothing(
    fake_bin: Path, settings: dict[str, str], words: str
) -> None:
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", **settings}
    result = _run("image.sh", env)
    assert result.returncode == 2
    assert result.stderr.startswith(f"image: {words}") and result.stderr.count("\n") == 1, result.stderr
    assert not (fake_bin / "calls").exists(), "no engine may run on bad input"


def _fstype(path: str) -> str:
    return subprocess.run(
        ["stat", "-fc", "%T", path], capture_output=True, text=True, check=False
    ).stdout.strip()


def _hybrid_cgroups() -> bool:
    """cgroup v1 controllers plus a v2 "unified" mount: where crun cannot start containers."""
    return _fstype("/sys/fs/cgroup") != "cgroup2fs" and _fstype("/sys/fs/cgroup/unified") == "cgroup2fs"


@pytest.mark.skipif(os.geteuid() != 0, reason="podman_setup.sh configures root's podman only")
def test_podman_setup_writes_the_host_limits_once(fake_bin: Path, tmp_path: Path) -> None:
    conf_d = tmp_path / "containers.conf.d"
    env = {
        **os.environ,
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "ROCKSIDECAR_CONTAINERS_CONF_D": str(conf_d),
    }
    # Hard limits below podman's default of 1048576, as on the machines this project runs on.
    limits = ("prlimit", "--nofile=4096:4096", "--nproc=30000:30000")
    first = _run("podman_setup.sh", env, prefix=limits)
    assert first.returncode == 0, first.stderr
    dropin = conf_d / "50-rocksidecar.conf"
    text = dropin.read_text()
    assert '[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=30000:30000"]\n' in text
    assert ('[engine]\nruntime = "runc"\n' in text) == _hybrid_cgroups()
    written = dropin.stat().st_mtime_ns
    second = _run("podman_setup.sh", env, prefix=limits)
    assert second.returncode == 0 and "is up to date" in second.stdout
    assert dropin.stat().st_mtime_ns == written
    # A host whose limits changed gets the file rewritten.
    third = _run("podman_setup.sh", env, prefix=("prlimit", "--nofile=2048:2048", "--nproc=30000:30000"))
    assert third.returncode == 0
    assert '"nofile=2048:2048"' in dropin.read_text()
    assert "info" in (fake_bin / "calls").read_text()
