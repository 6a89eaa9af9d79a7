"""The ``rocksidecar`` command. Each subcommand lives beside what it runs and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# subcommand -> module with register(subparsers); loaded on demand so `rocksidecar store` does not
# import FastAPI and `rocksidecar spark-publish` does not import RocksDB.
COMMANDS: dict[str, str] = {
    "serve": "app.serve_cli",
    "devbroker": "devbroker.cli",
    "store": "retry.cli",
    "dmq": "delay.cli",
    "spark-publish": "pipeline.cli",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocksidecar", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=f"(see rocksidecar {name} --help)", add_help=False)
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue  # that part of rocksidecar is not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(args_list)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
