"""The benchmarks pre-fill stores in bounded chunks: every item's writes land, across chunk edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import bulk
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import RocksKV


def test_every_item_is_written_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "CHUNK", 2)
    bulk.bulk_write(tmp_path, ["a", "b"], 5, lambda i: [Put("a", b"%d" % i, b"x"), Put("b", b"%d" % i, b"")])
    kv = RocksKV.open(tmp_path, ["a", "b"])
    try:
        assert [kv.get("a", b"%d" % i) for i in range(6)] == [b"x"] * 5 + [None]
        assert kv.count("b") == 5
    finally:
        kv.close()
