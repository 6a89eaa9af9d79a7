"""The locked build (issue 26): every install takes exact versions and hashes from tools/lock/, the lock
satisfies pyproject.toml, and the environment the suite runs in holds exactly what the lock names."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement

from tests.deploy.paths import REPO, load_script

LOCK = REPO / "tools" / "lock"
lock_check = load_script("lock_check", "tools")


def planned(target: str) -> str:
    """What `make TARGET` would run on a fresh clone (-B: as if nothing were built yet)."""
    out = subprocess.run(
        ["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout


def pip_installs(plan: str) -> list[str]:
    return [line for line in plan.splitlines() if "pip install" in line]


def test_make_run_installs_only_from_the_runtime_lock_and_checks_it() -> None:
    plan = planned("run")
    installs = pip_installs(plan)
    assert any("--require-hashes --no-deps -r tools/lock/build.txt" in line for line in installs), plan
    assert any("--require-hashes --no-deps -r tools/lock/runtime.txt" in line for line in installs), plan
    # the project itself: no dependency resolved, the locked setuptools builds it
    assert any(line.endswith("--no-deps --no-build-isolation -e .") for line in installs), plan
    assert all("--no-deps" in line for line in installs), installs
    # exactly the lock on a fresh venv; one that `make test` built keeps its dev set
    assert "lock_check.py $(test -e .venv/.installed-stamp || echo --exact) tools/lock/build.txt" in plan, (
        plan
    )
    assert "dev.txt" not in plan, plan


def test_make_test_syncs_the_venv_to_the_dev_lock() -> None:
    plan = planned("test")
    installs = pip_installs(plan)
    assert any("--require-hashes --no-deps -r tools/lock/dev.txt" in line for line in installs), plan
    assert all("--no-deps" in line for line in installs), installs
    assert "lock_check.py --sync tools/lock/build.txt tools/lock/dev.txt" in plan, plan


def test_the_image_installs_the_runtime_lock_and_checks_it() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert "--require-hashes \\\n        --no-deps -r tools/lock/runtime.txt" in dockerfile
    assert "lock_check.py --exact" in dockerfile and "tools/lock/runtime.txt" in dockerfile


def test_this_environment_holds_exactly_the_lock() -> None:
    """`pip freeze` equals build.txt + dev.txt (the environment `make test` built)."""
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "lock_check.py"),
            "--exact",
            str(LOCK / "build.txt"),
            str(LOCK / "dev.txt"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def pins(name: str) -> dict[str, str]:
    return lock_check.read_locks([LOCK / name])


def test_every_pin_carries_hashes() -> None:
    for name in ("build.txt", "runtime.txt", "dev.txt"):
        text = (LOCK / name).read_text()
        for block in re.split(r"\n(?=[A-Za-z0-9])", text):
            if "==" in block.splitlines()[0]:
                assert "--hash=sha256:" in block, f"{name}: {block.splitlines()[0]} has no hash"


def test_the_runtime_and_build_locks_agree_with_the_dev_lock() -> None:
    dev = pins("dev.txt")
    for name in ("runtime.txt", "build.txt"):
        for package, version in pins(name).items():
            if package in dev:
                assert dev[package] == version, f"{package}: {name} says {version}, dev.txt {dev[package]}"
    assert set(pins("runtime.txt")) <= set(dev)


def requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = [("runtime.txt", Requirement(r)) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        out += [("dev.txt", Requirement(r)) for r in extra]
    return [(lock, r) for lock, r in out if r.name != "rocksidecar"]


@pytest.mark.parametrize(("lock", "requirement"), requirements(), ids=str)
def test_the_lock_satisfies_pyproject(lock: str, requirement: Requirement) -> None:
    """A dependency added or narrowed in pyproject.toml without `make lock` fails here, by name."""
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        return
    locked = pins(lock).get(lock_check.canonical(requirement.name))
    assert locked is not None, f"{requirement.name} is not in tools/lock/{lock}: run `make lock`"
    assert requirement.specifier.contains(locked, prereleases=True), (
        f"tools/lock/{lock} has {requirement.name}=={locked}, pyproject.toml asks {requirement}: "
        "run `make lock`"
    )


def test_lock_check_names_each_difference() -> None:
    locked = {"uvicorn": "0.54.0", "httptools": "0.9.0"}
    found = {"uvicorn": "0.55.0", "stray": "1.0"}
    assert lock_check.differences(locked, found, exact=True) == [
        "missing: httptools==0.9.0",
        "wrong version: uvicorn==0.55.0, the lock says 0.54.0",
        "not in the lock: stray==1.0",
    ]
    assert lock_check.differences(locked, found, exact=False)[-1].startswith("wrong version")
    assert lock_check.canonical("aws-cdk.Lambda_Layer") == "aws-cdk-lambda-layer"
