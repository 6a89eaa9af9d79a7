from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import assemble_parent


@pytest.fixture(scope="session")
def parent_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return assemble_parent(tmp_path_factory.mktemp("orders-app"))
