"""The ``rocksidecar`` command. Each subcommand lives beside what it runs and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib import metadata

# subcommand -> module with register(subparsers); loaded on demand so `rocksidecar store` does not
# import FastAPI and `rocksidecar spark-publish` does not import RocksDB.
COMMANDS: dict[str, str] = {
    "serve": "app.serve_cli",
    "devbroker": "devbroker.cli",
    "store": "app.store_cli",
    "spark-publish": "pipeline.cli",
    "dmq": "app.dmq.cli",
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
            importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(args_list)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
