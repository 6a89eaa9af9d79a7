"""The public surface of the client packages is exactly their sorted __all__, and every name imports."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["rmq", "rocksidecar.rmq.producer", "rocksidecar.rmq.consumer"])
def test_all_is_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    names = module.__all__
    assert names == sorted(names)
    for name in names:
        assert getattr(module, name) is not None, name
    public = {n for n in vars(module) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(names) | {"annotations"}, public - set(names)
