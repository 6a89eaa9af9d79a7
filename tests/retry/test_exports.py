"""The public surface of retry/ and storage/ is what their __all__ lists, and each name resolves."""

from __future__ import annotations

import pytest

from rocksidecar import retry, storage


@pytest.mark.parametrize("package", [retry, storage])
def test_all_names_resolve(package: object) -> None:
    names: list[str] = getattr(package, "__all__")  # noqa: B009 (ruff RUF022 keeps it sorted)
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(package, name) is not None


def test_storage_does_not_import_rocksdict_eagerly() -> None:
    import subprocess
    import sys

    code = "import sys, rocksidecar.storage, rocksidecar.retry; print('rocksdict' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # app/config imports retry.policy; RocksDB loads on open
