"""Small JSON state files (topics, consumer offsets) written atomically: temp file, then rename."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson


def write_json(path: Path, doc: Any) -> None:
    """Replace ``path`` with ``doc`` so that a crash leaves either the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The document in ``path``, or None when there is no such file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
