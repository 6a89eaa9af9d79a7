"""Container tests (`make e2e`): the image and the chart's pod run with podman. Skipped with a clear
reason unless ROCKSIDECAR_E2E_IMAGE names the image to test (make e2e builds it and sets it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

IMAGE_ENV = "ROCKSIDECAR_E2E_IMAGE"
BUSYBOX_ENV = "ROCKSIDECAR_E2E_BUSYBOX"  # the example app's image: wget and sh
DEFAULT_BUSYBOX = "localhost/rocksidecar-busybox:bookworm"  # built by tools/debian_base.sh


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            # Containers start and stop at the pace of a shared 2-core machine: more than the default.
            item.add_marker(pytest.mark.timeout(300))


@pytest.fixture(scope="session")
def image() -> str:
    name = os.environ.get(IMAGE_ENV)
    if not name:
        pytest.skip(f"container tests need {IMAGE_ENV}=<image> and podman: run `make e2e`")
    if shutil.which("podman") is None:
        pytest.fail(f"{IMAGE_ENV} is set but podman is missing: run tools/podman_setup.sh")
    return name


@pytest.fixture(scope="session")
def busybox() -> str:
    return os.environ.get(BUSYBOX_ENV, DEFAULT_BUSYBOX)
