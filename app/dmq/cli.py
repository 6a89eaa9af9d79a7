"""``rocksidecar dmq``: run the Rock-DMQ service (consume the inner topic, publish when due)."""

from __future__ import annotations

import argparse
import os
import sys

from .. import config

INNER_TOPIC_ENV = "ROCKSIDECAR_DMQ_INNER_TOPIC"
GROUP_ENV = "ROCKSIDECAR_DMQ_GROUP"
HTTP_ADDR_ENV = "ROCKSIDECAR_DMQ_HTTP_ADDR"
INSTANCE_ENV = "ROCKSIDECAR_DMQ_INSTANCE"


HELP = "run the Rock-DMQ service (arbitrary delays for every producer)"
DESCRIPTION = (
    "Consume the inner topic, keep each delayed message in the local delay store (synced before its "
    "offset is committed) and publish it to its real topic when due."
)
EPILOG = "Broker, store and retry settings are the sidecar's ROCKSIDECAR_* settings (--help-settings)."
SETTINGS = True  # --config and --help-settings (app.cli)


def add_arguments(p: argparse.ArgumentParser) -> None:
    for flag, env, default, what in (
        ("--inner-topic", INNER_TOPIC_ENV, "dmq_inner_topic", "the inner topic"),
        ("--group", GROUP_ENV, "dmq_service_group", "consumer group of the replicas"),
        ("--http-addr", HTTP_ADDR_ENV, "127.0.0.1:9890", "/healthz, /readyz, /metrics"),
    ):
        help_ = f"{what} (env {env}; default {default})"
        p.add_argument(flag, default=os.environ.get(env, default), help=help_)
    p.add_argument(
        "--instance",
        default=os.environ.get(INSTANCE_ENV),
        help=f"this replica's instance name, e.g. the pod name (env {INSTANCE_ENV})",
    )
    p.add_argument(
        "--offset-persist-s",
        type=float,
        default=5.0,
        metavar="S",
        help="commit inner offsets every S s (default 5, as Java)",
    )


def run(args: argparse.Namespace) -> int:
    from rocksidecar.rmq.errors import InvalidMessageError
    from rocksidecar.rmq.message import validate_topic

    from ..api.servers import split_addr

    try:
        settings = config.load(file=args.config)
        validate_topic(args.inner_topic)
        if args.offset_persist_s <= 0:
            raise config.ConfigError("--offset-persist-s: must be positive")
        if not args.group.strip():
            raise config.ConfigError("--group: must not be empty")
        try:
            split_addr(args.http_addr)
        except ValueError:
            raise config.ConfigError(f"--http-addr: {args.http_addr!r} is not HOST:PORT") from None
    except InvalidMessageError as exc:
        print(f"rocksidecar dmq: configuration error: --inner-topic: {exc}", file=sys.stderr)
        return 2
    except (config.ConfigError, ValueError) as exc:
        print(f"rocksidecar dmq: configuration error: {exc}", file=sys.stderr)
        return 2
    from ..wiring import StartupError
    from .service import DmqOptions, serve

    options = DmqOptions(
        args.inner_topic,
        args.group,
        args.http_addr,
        args.instance,
        persist_interval_s=args.offset_persist_s,
    )
    try:
        return serve(settings, options)
    except StartupError as exc:
        print(f"rocksidecar dmq: cannot start: {exc}", file=sys.stderr)
        return 1
