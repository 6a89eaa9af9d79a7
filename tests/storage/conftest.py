from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rocksidecar.storage.kv import KV
from rocksidecar.storage.memory import MemoryKV
from rocksidecar.storage.rocks import RocksKV

CFS = ("alpha", "beta")


@pytest.fixture(params=["memory", "rocks"])
def kv(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KV]:
    store: KV = MemoryKV(CFS) if request.param == "memory" else RocksKV.open(tmp_path / "db", CFS)
    yield store
    store.close()
