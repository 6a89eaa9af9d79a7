"""docker/Dockerfile: hadolint-clean, and the image shape the chart relies on (no Docker engine here)."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import tomllib

from tests.deploy import dockerfile
from tests.deploy.paths import DOCKERFILE, DOCKERIGNORE, REPO, tool

ARGS, STAGES = dockerfile.parse(DOCKERFILE)
BUILD, RUNTIME = STAGES[0], STAGES[-1]
STORE = "/var/lib/rocksidecar"


def _hadolint(dockerfile_text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("hadolint"), "--no-color", "-"],
        input=dockerfile_text,
        capture_output=True,
        text=True,
        check=False,
    )


def test_hadolint_reports_nothing() -> None:
    result = _hadolint(DOCKERFILE.read_text())
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_fail_on_warnings() -> None:
    result = _hadolint("FROM python:latest\nUSER root\n")
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_multi_stage_on_slim_python_311() -> None:
    assert len(STAGES) == 2 and BUILD.name == "build"
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", ARGS["PYTHON_IMAGE"]), ARGS
    assert {s.base for s in STAGES} == {"${PYTHON_IMAGE}"}
    assert RUNTIME.all("COPY")[0].startswith("--from=build /opt/rocksidecar ")


def test_build_installs_the_project_without_dev_or_spark_extras() -> None:
    # Every "pip install" or "pip --python <venv python> install" takes the lock (no resolution, no extra)
    # or the project's own wheel, never `.[extra]`.
    runs = [run for run in BUILD.all("RUN") if re.search(r"\bpip( --python \S+)? install\b", run)]
    installs = [
        part for run in runs for part in run.split("&&") if re.search(r"\bpip( --python \S+)? install", part)
    ]
    assert installs and all("--no-deps" in part and "[" not in part for part in installs), installs
    assert all("--require-hashes" in part or "/tmp/wheel/" in part for part in installs), installs
    assert not any("dev.txt" in part for part in installs), installs
    assert not any("pip" in run for run in RUNTIME.all("RUN")), "the runtime stage must not install"


def test_runtime_runs_as_a_fixed_non_root_uid_and_declares_the_store_volume() -> None:
    user = RUNTIME.one("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) >= 10000 and gid == uid, "numeric UID so runAsNonRoot can verify it"
    assert dockerfile.exec_form(RUNTIME.one("VOLUME")) == [STORE]
    assert RUNTIME.env()["ROCKSIDECAR_DATA_DIR"] == STORE
    assert f"install -d -o {uid} -g {gid}" in RUNTIME.one("RUN"), "the store must belong to that user"


def test_entrypoint_is_the_console_script_and_cmd_is_serve() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert dockerfile.exec_form(RUNTIME.one("ENTRYPOINT")) == ["rocksidecar"]
    assert "rocksidecar" in scripts
    assert dockerfile.exec_form(RUNTIME.one("CMD")) == ["serve"]


def test_healthcheck_uses_python_on_healthz() -> None:
    check = RUNTIME.one("HEALTHCHECK")
    command = dockerfile.exec_form(check.split(" CMD ", 1)[1])
    assert command[0] == "python" and command[-1] == "/healthz"
    script = command[1]
    copied = [c for c in RUNTIME.all("COPY") if c.endswith(" /opt/rocksidecar/libexec/")]
    assert copied and "docker/healthcheck.py" in copied[0] and script.endswith("/libexec/healthcheck.py")


def test_listeners_stay_on_loopback_unless_the_environment_says_otherwise() -> None:
    env = RUNTIME.env()
    assert "ROCKSIDECAR_HTTP_ADDR" not in env and "ROCKSIDECAR_GRPC_ADDR" not in env
    assert not RUNTIME.all("EXPOSE")


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics, closely enough for an allow-list: the last pattern matching the path or
    one of its parent directories decides; '!' re-includes."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = pattern.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatchcase(p, glob) for p in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_sends_what_copy_needs_and_nothing_else() -> None:
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and line[0] != "#"
    ]
    sources = []
    for stage in STAGES:
        for copy in stage.all("COPY"):
            if not copy.startswith("--from="):
                sources += copy.split()[:-1]
    assert "pyproject.toml" in sources and "docker/healthcheck.py" in sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert not _ignored(source.rstrip("/") + ("/x.py" if source.endswith("/") else ""), patterns), source
    for junk in (".venv/bin/python", ".git/HEAD", "data/000001.sst", "tests/app/test_config.py"):
        assert _ignored(junk, patterns), junk
    assert _ignored("app/__pycache__/config.cpython-311.pyc", patterns)


def test_build_copies_every_package_pyproject_installs() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["rocksidecar*"]
    # rocksidecar/ and the top-level folders its links name: the links must resolve inside the context
    linked = {p.name for p in (REPO / "rocksidecar").iterdir() if p.is_symlink()}
    assert linked == {"app", "rmq", "retry", "delay", "storage", "devbroker", "pipeline"}
    packages = {"rocksidecar", *linked}
    copied = {c.split()[0].rstrip("/") for c in BUILD.all("COPY")} - {"pyproject.toml"}
    assert copied - {"tools/lock", "tools/lock_check.py"} == packages, (
        "docker/Dockerfile and .dockerignore must list the same packages"
    )
    assert any(pyproject["project"]["readme"] in copy.split() for copy in BUILD.all("COPY"))


def test_runtime_carries_oci_labels_from_build_args_one_arg_per_line() -> None:
    # tools/image.sh passes VERSION, REVISION and SOURCE; buildah reads only the first name of a
    # multi-name ARG, so each has its own.
    declared = [arg.partition("=")[0] for arg in RUNTIME.all("ARG")]
    assert declared == ["VERSION", "REVISION", "SOURCE"]
    labels = dict(item.split("=", 1) for item in shlex.split(" ".join(RUNTIME.all("LABEL"))))
    for name in declared:
        assert labels[f"org.opencontainers.image.{name.lower()}"] == f"${{{name}}}"


def test_build_stage_strips_extension_modules_and_runtime_has_no_build_tools() -> None:
    assert any("strip --strip-unneeded" in run and "binutils" in run for run in BUILD.all("RUN"))
    assert not any("apt-get" in run for run in RUNTIME.all("RUN"))
