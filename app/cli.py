"""The ``rocksidecar`` command. Each subcommand lives beside what it runs, declared the same way (HELP,
DESCRIPTION, optional EPILOG and SETTINGS, add_arguments and run), and is imported here plainly."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from types import ModuleType

from rocksidecar.devbroker import cli as devbroker_cli
from rocksidecar.pipeline import cli as pipeline_cli

from . import serve_cli, store_cli
from .dmq import cli as dmq_cli

# subcommand -> the module that declares it. Declaring a command imports only what its arguments need:
# each run() imports the heavy parts (FastAPI, RocksDB, Spark) of what it starts.
COMMANDS: dict[str, ModuleType] = {
    "serve": serve_cli,
    "devbroker": devbroker_cli,
    "store": store_cli,
    "spark-publish": pipeline_cli,
    "dmq": dmq_cli,
}
DESCRIPTION = (
    "A reliable-delivery sidecar for Apache RocketMQ: applications send messages over HTTP or gRPC on "
    "localhost; a message answered 2xx is stored by a broker or synced to a local store and replayed "
    "until delivered."
)
EPILOG = "Run 'rocksidecar COMMAND --help' for a command's options."


def version() -> str:
    try:
        return metadata.version("rocksidecar")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocksidecar", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"rocksidecar {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        if only is None or name == only:  # only the command being run: its imports are all we pay for
            _add_command(sub, name, module)
    return parser


def _add_command(sub: argparse._SubParsersAction, name: str, mod: ModuleType) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(name, help=mod.HELP, description=mod.DESCRIPTION, epilog=getattr(mod, "EPILOG", None))
    if getattr(mod, "SETTINGS", False):  # a command that reads the sidecar's settings
        from .config import CONFIG_ENV

        p.add_argument(
            "--config",
            default=os.environ.get(CONFIG_ENV),
            help="YAML settings file (environment variables override it)",
        )
        p.add_argument("--help-settings", action="store_true", help="list every setting and exit")
    mod.add_arguments(p)
    p.set_defaults(func=mod.run)


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "help_settings", False):
        from . import config

        print(config.describe())
        return 0
    return int(args.func(args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    try:
        return _run(parser.parse_args(args_list))
    except BrokenPipeError:
        # Read by `head` or a pager that quit early: not an error worth a traceback. Python would
        # still fail flushing stdout at exit, so it is pointed at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer killed by the signal


if __name__ == "__main__":
    sys.exit(main())
