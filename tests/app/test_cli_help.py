"""The `rocksidecar` command's help (issue 17 item 10): --version, user-facing descriptions without
internal docstrings or reStructuredText, help on every option and argument, and --help-settings listing
the YAML-only settings too."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from importlib import metadata

import pytest

from rocksidecar.app import config
from rocksidecar.app.cli import COMMANDS, build_parser, main


def parsers(
    parser: argparse.ArgumentParser, path: str = "rocksidecar"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{path} {name}")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"rocksidecar {metadata.version('rocksidecar')}"


@pytest.mark.parametrize("argv", [[], *([c] for c in COMMANDS)], ids=lambda a: " ".join(["rocksidecar", *a]))
def test_help_is_for_users(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out, out  # reStructuredText from a module docstring
    assert "registers itself" not in out and "subcommand lives" not in out, out
    assert len(out.split("\n\n")[1].strip()) > 40, out  # a description follows the usage


def test_every_option_and_argument_has_help() -> None:
    missing = []
    for path, parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{path} {c.dest}" for c in action._choices_actions if not c.help]
            elif not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"no help for: {', '.join(missing)}"


def test_help_settings_lists_yaml_only_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help-settings"]) == 0
    out = capsys.readouterr().out
    for setting in config.SETTINGS:
        assert setting.env in out
    for key in ("retry.default.ladder_s", "retry.default.max_retries", "retry.types.<type>"):
        assert key in out
    assert "retry.dead_letter_webhook" in out
    assert "[3, 5, 30, 60, 120, 300, 480, 600, 900, 1800]" in out  # the real default ladder
