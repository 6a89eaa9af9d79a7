"""The README's Python examples read as the project's own code does: they parse, and `ruff format` would
leave them as they are (`make lint` formats the code's folders, not the README)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .readme import ROOT, Block, blocks

PYTHON_BLOCKS = [b for b in blocks() if b.lang == "python"]
RUFF = Path(sys.executable).with_name("ruff")


def test_the_readme_has_python_examples() -> None:
    assert PYTHON_BLOCKS


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: f"line{b.line}")
def test_python_example_parses_and_is_formatted(block: Block) -> None:
    ast.parse(block.text)  # a SyntaxError names the line
    if not RUFF.exists():
        pytest.skip(f"no ruff beside {sys.executable}")
    done = subprocess.run(
        [str(RUFF), "format", "--diff", "--stdin-filename", "readme_example.py", "-"],
        input=block.text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, f"{block.where()}: ruff format would change it:\n{done.stdout}{done.stderr}"
