"""A subscription's settings (the `subscriptions:` list of the YAML file, or ROCKSIDECAR_SUBSCRIPTIONS
holding the same list as YAML/JSON), validated at start; errors name the entry and the key."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from rocksidecar.rmq.consumer.config import CONCURRENT_MAX_RECONSUME_TIMES, default_max_reconsume_times
from rocksidecar.rmq.message import TOPIC_MAX_LEN, TOPIC_PATTERN
from rocksidecar.rmq.message_codec import MAX_BODY_BYTES

from ..localhost import local_url_error
from ..setting_words import parse_bool, parse_float, parse_int
from ..settings_yaml import load_yaml, yaml_error_line

MODES = ("concurrent", "orderly")
CONSUME_FROM = ("last", "first", "timestamp")
# averagely: Java's default, the one to use when Java clients share the group; bounded_hash and sticky
# need every member to be a rocksidecar (sticky: balanced and moving only what a change must move).
ALLOCATIONS = ("averagely", "bounded_hash", "sticky")
EXPRESSION_TYPES = ("TAG", "SQL92")  # rmq.broker.EXPRESSION_TYPES
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
GRPC_ENDPOINT = "grpc"
MAX_BODY_LIMIT = 1 << 30  # max_body_bytes above 1 GiB would be no bound at all


class SpecError(ValueError):
    """One subscription setting is invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class SubscriptionSpec:
    name: str
    topic: str
    group: str
    endpoint: str  # http://localhost:PORT/path of the app, or "grpc": the app pulls with Subscribe
    expression: str = "*"  # tags: * or TagA || TagB; with expression_type SQL92 a filter on properties
    expression_type: str = "TAG"  # or SQL92 (the brokers need enablePropertyFilter=true)
    mode: str = "concurrent"
    concurrency: int = 20
    timeout_s: float = 15.0  # one POST to the app; longer counts as a failure
    # Failures before a message goes to the DLQ. Unset, Java's default by mode (parse_one): 16 in
    # concurrent mode, none in orderly (ORDERLY_MAX_RECONSUME_TIMES): an orderly queue waits at a failing
    # message until the app takes it, as a Java member of the same group does.
    max_reconsume_times: int = CONCURRENT_MAX_RECONSUME_TIMES
    consume_from: str = "last"
    consume_timestamp_ms: int | None = None
    allocation: str = "averagely"
    # At most this many messages per queue are handed to the app beyond the offset the broker has
    # acknowledged (rmq.consumer.commit_window): the bound on redeliveries after a SIGKILL. 0: off.
    commit_window: int = 256
    # Dapr's bulk subscribe: up to bulk_max_messages of one queue in one POST, statuses per entry.
    bulk: bool = False
    bulk_max_messages: int = 100
    # The most a compressed body may inflate to (rmq.message_codec.MAX_BODY_BYTES, 16 MiB); one past it,
    # or one that does not inflate, goes to the group's DLQ undelivered.
    max_body_bytes: int = MAX_BODY_BYTES

    @property
    def grpc(self) -> bool:
        return self.endpoint == GRPC_ENDPOINT

    @property
    def orderly(self) -> bool:
        return self.mode == "orderly"


_KEYS = set(SubscriptionSpec.__dataclass_fields__)  # what parse_one accepts: the dataclass's fields
_REQUIRED = ("name", "topic", "group", "endpoint")
REQUIRED = object()  # the default shown for a required key
# Help for --help-settings, listed from the dataclass's fields (subscription_keys), so a key without
# help still shows up, and tests require help for each one.
SUBSCRIPTION_KEY_HELP: Mapping[str, str] = {
    "name": "Unique name of the subscription (1-64 letters, digits, '_', '.', '-').",
    "topic": "Topic to consume.",
    "group": "Consumer group (one subscription per group).",
    "endpoint": "http://localhost:PORT/path of the app (localhost, 127.x.x.x or [::1] literals only), "
    "or grpc: the app pulls with Subscribe.",
    "expression": "Tags (* or TagA || TagB), or with expression_type SQL92 a filter on properties.",
    "expression_type": f"One of {', '.join(EXPRESSION_TYPES)} (SQL92 needs enablePropertyFilter=true).",
    "mode": f"One of {', '.join(MODES)}.",
    "concurrency": "Messages pushed to the app at once (1-1000).",
    "timeout_s": "Longest one POST to the app may take; longer counts as a failure.",
    "max_reconsume_times": "Redeliveries before a message goes to the group's DLQ (default 16; "
    "orderly: no limit, as Java's default).",
    "consume_from": f"Where a new group starts: one of {', '.join(CONSUME_FROM)}.",
    "consume_timestamp_ms": "With consume_from: timestamp, the time to start from (ms since the epoch).",
    "allocation": f"Queue allocation among members: one of {', '.join(ALLOCATIONS)}.",
    "commit_window": "Most messages per queue handed to the app beyond the acknowledged offset "
    "(bounds redeliveries after a crash); 0: off.",
    "bulk": "Dapr bulk subscribe: several messages of one queue per POST, statuses per entry.",
    "bulk_max_messages": "With bulk: most messages in one POST (1-1024).",
    "max_body_bytes": "Most bytes a compressed body may inflate to (default 16 MiB, 4x Java's 4 MiB "
    "maxMessageSize); a larger or corrupt one goes to the group's DLQ undelivered.",
}


def subscription_keys() -> list[tuple[str, Any]]:
    """Every key a subscription entry accepts with its default (REQUIRED for the required ones)."""
    fields = SubscriptionSpec.__dataclass_fields__.values()
    return [(f.name, REQUIRED if f.name in _REQUIRED else f.default) for f in fields]


def _int(raw: Any, where: str, lo: int, hi: int) -> int:
    return parse_int(raw, where, SpecError, lo, hi)


def _choice(raw: Mapping[str, Any], key: str, choices: tuple[str, ...], where: str) -> str:
    """One of ``choices`` (case-insensitive), the first being the default."""
    value = str(raw.get(key, choices[0])).strip()
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise SpecError(f"{where}.{key}: expected one of {', '.join(choices)}, got {raw.get(key)!r}")


def _max_reconsume_times(raw: Mapping[str, Any], mode: str, where: str) -> int:
    """As set (0-10000), or unset Java's default for the mode: maxReconsumeTimes -1 is 16 for a
    concurrent consumer and Integer.MAX_VALUE (never the DLQ) for an orderly one."""
    if "max_reconsume_times" not in raw:
        return default_max_reconsume_times(mode == "orderly")
    return _int(raw["max_reconsume_times"], f"{where}.max_reconsume_times", 0, 10_000)


def _bool(raw: Any, where: str) -> bool:
    return parse_bool(raw, where, SpecError)


def _endpoint(raw: Any, where: str) -> str:
    text = str(raw).strip()
    if text == GRPC_ENDPOINT:
        return text
    why = local_url_error(text)
    if why is not None:
        raise SpecError(
            f"{where}: the app must be on localhost (a sidecar pushes to its own pod), got {raw!r}: {why}"
        )
    return text


def parse_one(raw: Any, where: str) -> SubscriptionSpec:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected a mapping with name, topic, group and endpoint")
    unknown = sorted(set(map(str, raw)) - _KEYS)
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
    # A key left empty (`expression:`) is not set, as in the settings file: its default. Read as text,
    # its None became the tag filter "None", which matches nothing.
    raw = {k: v for k, v in raw.items() if v is not None}
    for key in _REQUIRED:
        if not str(raw.get(key) or "").strip():
            raise SpecError(f"{where}.{key}: required")
    name = str(raw["name"]).strip()
    if not _NAME.match(name):
        raise SpecError(f"{where}.name: 1-64 letters, digits, '_', '.' or '-', got {name!r}")
    for key in ("topic", "group"):
        value = str(raw[key]).strip()
        if not (len(value) <= TOPIC_MAX_LEN and TOPIC_PATTERN.fullmatch(value)):  # groups: the same charset
            raise SpecError(f"{where}.{key}: 1-127 letters, digits, '_', '-', '%' or '|', got {raw[key]!r}")
    mode = _choice(raw, "mode", MODES, where)
    consume_from = _choice(raw, "consume_from", CONSUME_FROM, where)
    allocation = _choice(raw, "allocation", ALLOCATIONS, where)
    timestamp = raw.get("consume_timestamp_ms")
    if consume_from == "timestamp" and timestamp is None:
        raise SpecError(f"{where}.consume_timestamp_ms: required with consume_from: timestamp")
    expression_type = _choice(raw, "expression_type", EXPRESSION_TYPES, where).upper()
    expression = str(raw.get("expression", "")).strip()
    if expression_type == "SQL92" and not expression:
        raise SpecError(f"{where}.expression: required with expression_type: SQL92 (e.g. a > 5)")
    if expression_type == "TAG" and expression.upper().startswith("SQL92:"):
        raise SpecError(f"{where}.expression: for an SQL92 filter set expression_type: SQL92, no prefix")
    expression = expression or "*"
    timeout_s = parse_float(raw.get("timeout_s", 15.0), f"{where}.timeout_s", SpecError, 0.001, 3600)
    bulk = _bool(raw.get("bulk", False), f"{where}.bulk")
    if bulk and mode != "concurrent":
        raise SpecError(f"{where}.bulk: only with mode: concurrent (orderly delivers one at a time)")
    if bulk and str(raw["endpoint"]).strip() == GRPC_ENDPOINT:
        raise SpecError(f"{where}.bulk: only with an http endpoint (Subscribe streams already)")
    return SubscriptionSpec(
        name=name,
        topic=str(raw["topic"]).strip(),
        group=str(raw["group"]).strip(),
        endpoint=_endpoint(raw["endpoint"], f"{where}.endpoint"),
        expression=expression,
        expression_type=expression_type,
        mode=mode,
        concurrency=_int(raw.get("concurrency", 20), f"{where}.concurrency", 1, 1000),
        timeout_s=timeout_s,
        max_reconsume_times=_max_reconsume_times(raw, mode, where),
        consume_from=consume_from,
        consume_timestamp_ms=None
        if timestamp is None
        else _int(timestamp, f"{where}.consume_timestamp_ms", 0, 2**63 - 1),
        allocation=allocation,
        commit_window=_int(raw.get("commit_window", 256), f"{where}.commit_window", 0, 1_000_000),
        bulk=bulk,
        bulk_max_messages=_int(raw.get("bulk_max_messages", 100), f"{where}.bulk_max_messages", 1, 1024),
        max_body_bytes=_int(
            raw.get("max_body_bytes", MAX_BODY_BYTES), f"{where}.max_body_bytes", 1024, MAX_BODY_LIMIT
        ),
    )


def parse_subscriptions(raw: Any, name: str) -> tuple[SubscriptionSpec, ...]:
    """A list of subscriptions; from the environment, a YAML or JSON string holding that list."""
    if isinstance(raw, str):
        try:
            raw = load_yaml(raw) if raw.strip() else []
        except yaml.YAMLError as exc:
            raise SpecError(f"{name}: not valid YAML/JSON: {yaml_error_line(exc)}") from None
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(f"{name}: expected a list of subscriptions")
    specs = tuple(parse_one(item, f"{name}[{i}]") for i, item in enumerate(raw))
    for attr in ("name", "group"):
        seen: set[str] = set()
        for i, spec in enumerate(specs):
            value = getattr(spec, attr)
            if value in seen:
                why = " (one consumer per group in a process)" if attr == "group" else ""
                raise SpecError(f"{name}[{i}].{attr}: {value!r} is used by another subscription{why}")
            seen.add(value)
    return specs
