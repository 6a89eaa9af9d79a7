"""The README's shell commands are real (issue 17 item 14): each stage of a pipe is a program, every
`rocksidecar` command parses with the real CLI, the `store` examples use the store `make run` creates,
and no sentence offers the same thing twice ("`SENT` or `SENT`")."""

from __future__ import annotations

import re

import pytest

from rocksidecar.app.cli import build_parser
from tests.docs.readme import FILTERS, README, ROOT, blocks, commands, pipeline_stages

SHELL = [c for b in blocks() if b.lang == "sh" for c in commands(b)]


def demo_data_dir() -> str:
    """Where `make run` (tools/demo.sh) keeps the sidecar's store."""
    demo = (ROOT / "tools" / "demo.sh").read_text()
    run = re.search(r"^RUN=(\S+)$", demo, re.MULTILINE)
    data = re.search(r'ROCKSIDECAR_DATA_DIR="?([^"\s]+)"?', demo)
    assert run and data, "tools/demo.sh no longer sets RUN= and ROCKSIDECAR_DATA_DIR"
    return data.group(1).replace("$RUN", run.group(1))


def test_the_readme_has_shell_commands() -> None:
    assert len(SHELL) >= 10 and any(c.argv[0] == "rocksidecar" for c in SHELL)


@pytest.mark.parametrize("command", SHELL, ids=lambda c: f"line{c.line}")
def test_what_follows_a_pipe_is_a_filter(command: object) -> None:
    assert hasattr(command, "argv")
    for stage in pipeline_stages(command.argv)[1:]:
        assert stage[0].rsplit("/", 1)[-1] in FILTERS, (
            f"README.md line {command.line}: `{' '.join(stage)}` is not a program a pipe feeds; "
            f"a shell reads `{command.text}` as a pipe"
        )


ROCKSIDECAR = [c for c in SHELL if c.argv[0] == "rocksidecar" and "[--" not in c.text]


@pytest.mark.parametrize("command", ROCKSIDECAR, ids=lambda c: f"line{c.line}")
def test_rocksidecar_commands_parse(command: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert hasattr(command, "argv")
    argv = pipeline_stages(command.argv)[0][1:]
    argv = ["X" if re.fullmatch(r"<[^>]*>|\.\.\.", a) else a for a in argv]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(
            f"README.md line {command.line}: `{command.text}` does not parse: {capsys.readouterr().err}"
        )
        raise AssertionError from exc


def test_store_examples_use_the_store_make_run_creates() -> None:
    expected = demo_data_dir()
    dirs = {
        (c.line, c.argv[c.argv.index("--data-dir") + 1])
        for c in SHELL
        if c.argv[:2] == ["rocksidecar", "store"] and "--data-dir" in c.argv
    }
    assert dirs, "the README shows no `rocksidecar store --data-dir` example"
    wrong = [f"line {line}: --data-dir {d}" for line, d in sorted(dirs) if d != expected]
    assert not wrong, f"`make run` keeps its store in {expected}; README.md {', '.join(wrong)}"


def test_no_sentence_offers_the_same_thing_twice() -> None:
    text = README.read_text()
    repeats = [
        (text[: m.start()].count("\n") + 1, m.group(0)) for m in re.finditer(r"(`[^`]+`) or\s+\1", text)
    ]
    assert not repeats, f"README.md repeats itself: {repeats}"
