"""Where the deployment files live, and a loader for the scripts under docker/ and tools/ (not packages)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
CHART = REPO / "helm" / "rocksidecar"
EXAMPLE_PARENT = REPO / "helm" / "examples" / "orders-app"
BIN = Path(sys.executable).parent  # the venv's bin: make install puts helm and hadolint there


def tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{path} is missing: run `make install`"
    return str(path)


def load_script(name: str, folder: str = "docker") -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", REPO / folder / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
