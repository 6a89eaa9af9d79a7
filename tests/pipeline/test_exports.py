"""The pipeline package's public surface is its sorted __all__; importing it starts no pyspark."""

from __future__ import annotations

import subprocess
import sys

from rocksidecar import pipeline


def test_all_is_sorted_and_importable() -> None:
    assert pipeline.__all__ == sorted(pipeline.__all__)
    for name in pipeline.__all__:
        assert getattr(pipeline, name) is not None, name
    public = {n for n in vars(pipeline) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(pipeline.__all__), public - set(pipeline.__all__)


def test_importing_the_package_does_not_import_pyspark() -> None:
    code = (
        "import sys, pipeline\n"
        "print('pyspark' in sys.modules, callable(pipeline.register), 'pyspark' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True", "True"]
