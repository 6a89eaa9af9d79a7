"""The README's fenced code blocks and the shell commands in them, with the README line each starts on,
for the tests that keep the README true (tests/docs/)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# what the answer shown under a command looks like: JSON, an indented or closing line, HTTP status and
# header lines of `curl -i`; any other line starts a command
_OUTPUT = re.compile(r'^(\s|[{}\[\]"<]|\.\.\.|HTTP/|[A-Za-z][\w-]*: )')
# what may follow a `|` in a README command: a filter, not a word of the command before it
FILTERS = {
    "grep",
    "jq",
    "head",
    "tail",
    "sort",
    "tee",
    "wc",
    "xargs",
    "less",
    "cut",
    "awk",
    "sed",
    "python",
    "python3",
}


@dataclass(frozen=True)
class Command:
    line: int  # README line the command starts on
    text: str  # as written, continuation lines joined
    argv: list[str]  # shell words, comments dropped
    output: str  # the lines shown under it, up to the next command


@dataclass(frozen=True)
class Block:
    line: int  # README line of the opening fence
    lang: str
    text: str
    heading: str  # the closest heading above it

    def where(self) -> str:
        return f"README.md line {self.line} (the `{self.lang}` block under '{self.heading}')"


def blocks(text: str | None = None) -> list[Block]:
    text = README.read_text() if text is None else text
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()]
        headings = re.findall(r"^#+ (.+)$", before, re.MULTILINE)
        found.append(
            Block(before.count("\n") + 1, match.group(1), match.group(2), headings[-1] if headings else "")
        )
    return found


def _starts_command(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#") and not _OUTPUT.match(line)


def commands(block: Block) -> list[Command]:
    """The commands of a shell block. A command continues over lines while a quote is open or a line
    ends with a backslash; the lines after it that do not start a command are its shown output."""
    lines = block.text.splitlines()
    found: list[Command] = []
    i = 0
    while i < len(lines):
        if not _starts_command(lines[i]):
            if found:
                last = found[-1]
                found[-1] = Command(
                    last.line, last.text, last.argv, (last.output + "\n" + lines[i]).strip("\n")
                )
            i += 1
            continue
        start, text = i, lines[i]
        while True:
            try:
                argv = shlex.split(text.replace("\\\n", " "), comments=True)
            except ValueError:  # an open quote: the command goes on
                argv = None
            if argv is not None and not text.endswith("\\"):
                break
            i += 1
            if i >= len(lines):
                raise ValueError(f"README.md line {block.line + 1 + start}: unterminated command")
            text += "\n" + lines[i]
        found.append(Command(block.line + 1 + start, text, argv, ""))
        i += 1
    return found


def pipeline_stages(argv: list[str]) -> list[list[str]]:
    """The stages of the command's first pipeline: `a | b` gives [a, b]; `&&`, `||` and `;` end it (what
    follows them is another command, not something the pipe feeds)."""
    stages: list[list[str]] = [[]]
    for word in argv:
        if word in ("||", "&&", ";"):
            break
        if word == "|":
            stages.append([])
        else:
            stages[-1].append(word)
    return [s for s in stages if s]
