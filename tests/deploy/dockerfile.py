"""A small Dockerfile reader: instructions per stage, with continuations joined and JSON forms parsed."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stage:
    base: str
    name: str = ""
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]

    def one(self, keyword: str) -> str:
        found = self.all(keyword)
        assert len(found) == 1, f"expected one {keyword} in stage {self.name or self.base}, got {found}"
        return found[0]

    def env(self) -> dict[str, str]:
        """ENV key=value pairs of this stage (the form this project uses)."""
        pairs: dict[str, str] = {}
        for arg in self.all("ENV"):
            for item in shlex.split(arg):
                key, _, value = item.partition("=")
                pairs[key] = value
        return pairs


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, arg = line.partition(" ")
            out.append((keyword.upper(), " ".join(arg.split())))
    return out


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Return (global ARG defaults, stages)."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, arg in instructions(path.read_text()):
        if keyword == "FROM":
            base, _, name = arg.partition(" AS ")
            stages.append(Stage(base.strip(), name.strip()))
        elif not stages and keyword == "ARG":
            key, _, value = arg.partition("=")
            args[key] = value
        elif stages:
            stages[-1].instructions.append((keyword, arg))
    return args, stages


def exec_form(arg: str) -> list[str]:
    """The JSON (exec) form of CMD/ENTRYPOINT/VOLUME; fails on the shell form."""
    value = json.loads(arg)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arg
    return value
