"""``rocksidecar serve``: run the sidecar (HTTP + gRPC APIs, producer, retry and delay stores)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import sys
from collections.abc import AsyncIterator

from . import config

HELP = "run the sidecar"
DESCRIPTION = (
    "Run the sidecar: the HTTP and gRPC APIs, the producer, and the retry and delay stores with their "
    "replay loops, until SIGTERM or SIGINT."
)
EPILOG = (
    "Settings come from ROCKSIDECAR_* environment variables and the optional YAML file; see --help-settings."
)
SETTINGS = True  # --config and --help-settings (app.cli)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--devbroker",
        action="store_true",
        help="start an embedded devbroker (name server + brokers on loopback) and use it",
    )
    p.add_argument(
        "--devbroker-brokers",
        type=int,
        default=2,
        choices=range(1, 27),  # devbroker's MAX_BROKERS (broker-a .. broker-z)
        metavar="N",
        help="brokers of the embedded devbroker (default 2)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = config.load(file=args.config, require_namesrv=not args.devbroker)
    except config.ConfigError as exc:
        print(f"rocksidecar: configuration error: {exc}", file=sys.stderr)
        return 2
    from .service import (  # imported late: it pulls in FastAPI, gRPC and RocksDB
        StartupError,
        serve,
    )
    from .tracing import spans

    try:
        flush_spans = spans.setup_from_env(settings.otel)  # spans over OTLP (the otel extra)
    except RuntimeError as exc:
        print(f"rocksidecar serve: cannot start: {exc}", file=sys.stderr)
        return 1
    override = functools.partial(_embedded_devbroker, args.devbroker_brokers) if args.devbroker else None
    try:
        return serve(settings, namesrv_override=override)
    except StartupError as exc:
        print(f"rocksidecar serve: cannot start: {exc}", file=sys.stderr)
        return 1
    finally:
        if flush_spans is not None:
            flush_spans()


@contextlib.asynccontextmanager
async def _embedded_devbroker(brokers: int) -> AsyncIterator[tuple[str, ...]]:
    """``serve --devbroker``: a name server and brokers on loopback for the process's lifetime. The only
    place the product touches devbroker (the CLI edge; import-linter checks it)."""
    from rocksidecar.devbroker import DevCluster

    async with DevCluster(brokers=brokers, namesrv_port=0, broker_base_port=0) as cluster:
        logging.getLogger("rocksidecar.app.service").info(
            "embedded devbroker: name server %s", cluster.namesrv_addr
        )
        yield (cluster.namesrv_addr,)
