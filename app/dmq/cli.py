"""``rocksidecar dmq``: run the Rock-DMQ service (consume the inner topic, publish when due)."""

from __future__ import annotations

import argparse
import math
import sys

from .. import config
from .defaults import INTERVAL_S, MAX_REFRESH_AFTER_S, REFRESH_AFTER_S, TIMEOUT_BEATS, presence_topic

# flag -> the setting it overrides (declared in app.config, which also reads its environment variable)
FLAGS = (
    ("--inner-topic", "dmq_inner_topic", "the inner topic"),
    ("--group", "dmq_group", "consumer group of the replicas"),
    ("--http-addr", "dmq_http_addr", "/healthz, /readyz, /metrics"),
    ("--instance", "dmq_instance", "this replica's instance name, e.g. the pod name"),
    ("--replicas", "dmq_replicas", "every replica's instance name, comma-separated (replicated mode)"),
    (
        "--copies",
        "dmq_copies",
        "replicas holding each message (replicated mode; 0: 2, or 1 with a single replica)",
    ),
    ("--marks-topic", "dmq_marks_topic", "topic of published marks (replicated mode)"),
)

# the durations in seconds: flag, default, help (run() checks their ranges)
SECONDS = (
    (
        "--presence-interval-s",
        INTERVAL_S,
        f"replicated mode: send a beat to the presence topic and read the live publishers every S s "
        f"(default {INTERVAL_S}): a crashed replica's share is taken over within about S, a frozen "
        f"one's within {TIMEOUT_BEATS} S",
    ),
    (
        "--refresh-after-s",
        REFRESH_AFTER_S,
        f"replicated mode: write a held message to the inner topic again each S s of its age "
        f"(default {REFRESH_AFTER_S:.0f}, 24 h; 0: never), so a replica rebuilding a lost volume finds "
        "it there after the inner topic's retention (72 h by default) deleted the first copy: keep S "
        "below that retention",
    ),
    ("--offset-persist-s", 5.0, "commit inner offsets every S s (default 5, as Java)"),
)

HELP = "run the Rock-DMQ service (arbitrary delays for every producer)"
DESCRIPTION = (
    "Consume the inner topic, keep each delayed message in the local delay store (synced before its "
    "offset is committed) and publish it to its real topic when due."
)
EPILOG = "Broker, store and retry settings are the sidecar's ROCKSIDECAR_* settings (--help-settings)."
SETTINGS = True  # --config and --help-settings (app.cli)


def add_arguments(p: argparse.ArgumentParser) -> None:
    for flag, name, what in FLAGS:
        setting = config.setting(name)
        # Only an empty text is "none": a falsy number is a value (--copies' 0 means 2, not no copies).
        shown = "none" if setting.default == "" else setting.default
        help_ = f"{what} (env {setting.env}; default {shown})"
        p.add_argument(flag, dest=name, default=None, help=help_)
    for flag, default, help_ in SECONDS:
        p.add_argument(flag, type=float, default=default, metavar="S", help=help_)


def run(args: argparse.Namespace) -> int:
    from rocksidecar.rmq.errors import InvalidMessageError
    from rocksidecar.rmq.message import validate_topic

    from ..api.servers import split_addr
    from .replicas import ReplicaSet

    flags = {name: (flag, getattr(args, name)) for flag, name, _ in FLAGS if getattr(args, name) is not None}

    def where(flag: str, name: str) -> str:  # the flag if given, else the environment variable
        return flag if name in flags else config.setting(name).env

    try:
        # Each flag through its setting's parser, as its environment variable is (the flag named).
        given = {name: config.setting(name).parse(raw, flag) for name, (flag, raw) in flags.items()}
        settings = config.load(file=args.config, overrides=given)
        validate_topic(settings.dmq_inner_topic)
        for flag, _, _ in SECONDS:  # float() takes "nan" and "inf"; NaN slips past a check like `<= 0`
            if not math.isfinite(getattr(args, flag.removeprefix("--").replace("-", "_"))):
                raise config.ConfigError(f"{flag}: must be a finite number of seconds")
        if args.offset_persist_s <= 0:
            raise config.ConfigError("--offset-persist-s: must be positive")
        if not (args.refresh_after_s == 0 or 1 <= args.refresh_after_s <= MAX_REFRESH_AFTER_S):
            raise config.ConfigError(
                f"--refresh-after-s: must be 0 (never) or 1 to {MAX_REFRESH_AFTER_S:.0f}"
            )
        if not 0 < args.presence_interval_s <= 60:
            raise config.ConfigError("--presence-interval-s: must be above 0 and at most 60")
        if settings.dmq_replicas:
            validate_topic(settings.dmq_marks_topic, "marks topic")
            validate_topic(presence_topic(settings.dmq_marks_topic), "presence topic (marks topic_presence)")
            if not settings.dmq_instance:
                raise config.ConfigError(
                    f"{where('--replicas', 'dmq_replicas')}: needs this replica's name "
                    f"({where('--instance', 'dmq_instance')})"
                )
            try:
                ReplicaSet.parse(settings.dmq_replicas, settings.dmq_instance, settings.dmq_copies or None)
            except ValueError as exc:
                raise config.ConfigError(f"{where('--replicas', 'dmq_replicas')}: {exc}") from None
        if not settings.dmq_group.strip():
            raise config.ConfigError(f"{where('--group', 'dmq_group')}: must not be empty")
        try:
            split_addr(settings.dmq_http_addr)
        except ValueError:
            addr = settings.dmq_http_addr
            raise config.ConfigError(
                f"{where('--http-addr', 'dmq_http_addr')}: {addr!r} is not HOST:PORT"
            ) from None
    except InvalidMessageError as exc:
        where_ = where("--inner-topic", "dmq_inner_topic")
        print(f"rocksidecar dmq: configuration error: {where_}: {exc}", file=sys.stderr)
        return 2
    except (config.ConfigError, ValueError) as exc:
        print(f"rocksidecar dmq: configuration error: {exc}", file=sys.stderr)
        return 2
    from ..wiring import StartupError
    from .options import DmqOptions
    from .service import serve

    options = DmqOptions(
        settings.dmq_inner_topic,
        settings.dmq_group,
        settings.dmq_http_addr,
        settings.dmq_instance or None,
        persist_interval_s=args.offset_persist_s,
        replicas=settings.dmq_replicas or None,
        copies=settings.dmq_copies or None,
        marks_topic=settings.dmq_marks_topic,
        presence_interval_s=args.presence_interval_s,
        refresh_after_s=args.refresh_after_s,
    )
    try:
        return serve(settings, options)
    except StartupError as exc:
        print(f"rocksidecar dmq: cannot start: {exc}", file=sys.stderr)
        return 1
