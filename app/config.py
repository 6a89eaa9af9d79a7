"""Settings: environment variables over an optional YAML file over defaults, validated at start.

This is the only module that reads the environment. Every setting is declared once: its type and
default as a field of ``Settings``, its name (and so its environment variable), parser and help in
``SETTINGS``, which also documents them (`rocksidecar serve --help-settings`) and lets tests check the
Helm chart against what the code accepts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.rmq.errors import InvalidMessageError
from rocksidecar.rmq.message import TOPIC_PATTERN, validate_topic
from rocksidecar.rmq.producer.selector import SelectorName
from rocksidecar.rmq.tls import client_context
from rocksidecar.storage.reserve import ReserveTooSmallError, store_write_buffer_bytes

from . import topic_allow
from .localhost import is_loopback, local_url_error
from .setting_words import parse_bool, parse_float, parse_int
from .settings_yaml import load_yaml, yaml_error_line
from .subscriptions.spec import (
    REQUIRED,
    SUBSCRIPTION_KEY_HELP,
    SpecError,
    SubscriptionSpec,
    parse_subscriptions,
    subscription_keys,
)

ENV_PREFIX = "ROCKSIDECAR_"
CONFIG_ENV = ENV_PREFIX + "CONFIG"  # path of the optional YAML file (same as --config)


HOUR_S = 3600.0  # the most a read timeout or the shutdown grace may be
MAX_STEP_S = 30 * 24 * 3600.0  # the longest wait between two attempts of a retry ladder
MAX_DELAY_MS = 100 * 365 * 24 * 3600 * 1000  # due times stay below the stores' MAX_DUE_MS (year 2286)
GROUP_MAX_LEN = 255  # Java's Validators.checkGroup: 1-255 characters of the topics' [%|a-zA-Z0-9_-]


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# --- parsers: each takes the raw value (str from env, any from YAML) and the setting's name ----------
def _scalar(raw: Any, name: str) -> str:
    """One value as its text, stripped. A list or mapping where one value belongs is refused: str() of it
    would be taken as a name ("['a', 'b']"), and of an alias-laden one could take all the memory."""
    if raw is None:  # a null left in a list, or reaching a parser some other way: never "None"
        raise ConfigError(f"{name}: expected a value, got none")
    if isinstance(raw, Mapping | list | tuple | set):
        kind = "a mapping" if isinstance(raw, Mapping) else "a list"
        raise ConfigError(f"{name}: expected a single value, got {kind}")
    text = str(raw).strip()
    # A quoted YAML "\0" or "\n" fits no setting: open() would raise at start, a name would match nothing.
    if _CONTROL.search(text):
        raise ConfigError(f"{name}: contains a control character, got {text!r}")
    return text


# The bounded parsers (and Group) are objects, not closures, so that their bounds can be read: tests hold
# the Helm chart's values.schema.json to them (its minimum, maximum, enum, pattern), lest they drift.
@dataclass(frozen=True, slots=True)
class IntRange:
    """An integer within ``lo`` .. ``hi`` (no upper bound when None)."""

    lo: int
    hi: int | None = None

    def __call__(self, raw: Any, name: str) -> int:
        return parse_int(_scalar(raw, name), name, ConfigError, self.lo, self.hi)


@dataclass(frozen=True, slots=True)
class FloatRange:
    """A number within ``lo`` .. ``hi``."""

    lo: float
    hi: float

    def __call__(self, raw: Any, name: str) -> float:
        return parse_float(_scalar(raw, name), name, ConfigError, self.lo, self.hi)


@dataclass(frozen=True, slots=True)
class Choice:
    """One of ``options``, read case-insensitively (the value is its lower case)."""

    options: tuple[str, ...]

    def __call__(self, raw: Any, name: str) -> str:
        text = _scalar(raw, name).lower()
        if text not in self.options:
            raise ConfigError(f"{name}: expected one of {', '.join(self.options)}, got {raw!r}")
        return text


def _int(lo: int, hi: int | None = None) -> IntRange:
    return IntRange(lo, hi)


RESERVE_MB = IntRange(0, 1024 * 1024)  # disk_reserve_mb, which store_write_buffer_bytes also bounds below


def _reserve_mb(raw: Any, name: str) -> int:
    value = RESERVE_MB(raw, name)
    try:
        store_write_buffer_bytes(value)
    except ReserveTooSmallError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    return value


def _float(lo: float, hi: float) -> FloatRange:
    return FloatRange(lo, hi)


def _text(raw: Any, name: str) -> str:
    return _scalar(raw, name)


def _required_text(raw: Any, name: str) -> str:
    text = _scalar(raw, name)
    if not text:
        raise ConfigError(f"{name}: must not be empty")
    return text


def _topic(raw: Any, name: str) -> str:
    """A topic the brokers take (rmq's own check, as a send's topic gets): a setting naming one that they
    refuse would have messages answered 2xx and then never delivered."""
    text = _scalar(raw, name)
    try:
        validate_topic(text, name)
    except InvalidMessageError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    return text


@dataclass(frozen=True, slots=True)
class Group:
    """A producer or consumer group the brokers take; ``optional``: empty is allowed (a fallback)."""

    optional: bool = False

    def __call__(self, raw: Any, name: str) -> str:
        text = _scalar(raw, name)
        if not text and self.optional:
            return text
        if not text:
            raise ConfigError(f"{name}: must not be empty")
        if len(text) > GROUP_MAX_LEN or not TOPIC_PATTERN.fullmatch(text):
            raise ConfigError(
                f"{name}: a group is 1-{GROUP_MAX_LEN} letters, digits, '_', '-', '%' or '|', got {text!r}"
            )
        return text


def _group(*, optional: bool = False) -> Group:
    return Group(optional)


def _bool(raw: Any, name: str) -> bool:
    return parse_bool(_scalar(raw, name), name, ConfigError, empty=False)  # an empty variable: off


def _addr(raw: Any, name: str) -> str:
    text = _scalar(raw, name)
    host, sep, port = text.rpartition(":")
    # isascii: str.isdigit() is true of "²" and other digits int() does not take
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) < 65536:
        raise ConfigError(f"{name}: expected host:port, got {raw!r}")
    return text


def _items(raw: Any, name: str, separators: str = ",") -> list[str]:
    """A list setting's entries: a YAML list of single values, or text separated by ``separators``."""
    if isinstance(raw, list | tuple):
        texts = [_scalar(item, name) for item in raw]
    else:
        text = _scalar(raw, name)
        for sep in separators[1:]:
            text = text.replace(sep, separators[0])
        texts = [t.strip() for t in text.split(separators[0])]
    return [t for t in texts if t]


def _addr_list(raw: Any, name: str) -> tuple[str, ...]:
    return tuple(_addr(item, name) for item in _items(raw, name, ",;"))


def _name_list(raw: Any, name: str) -> tuple[str, ...]:
    return tuple(_items(raw, name))


def _topic_list(raw: Any, name: str) -> tuple[str, ...]:
    entries = _name_list(raw, name)
    try:
        topic_allow.check_entries(entries)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    return entries


def _choice(*options: str) -> Choice:
    return Choice(options)


def _local_url(raw: Any, name: str) -> str:
    text = _scalar(raw, name)
    error = local_url_error(text) if text else None
    if error is not None:
        raise ConfigError(f"{name}: {error}")
    return text


def _webhook_url(raw: Any, name: str) -> str:
    """An http(s) URL with a host, or empty (none): anything else would only fail at each dead letter."""
    text = _scalar(raw, name)
    if not text:
        return text
    try:
        parts = urlsplit(text)
        _ = parts.port  # ValueError for a port out of range or not a number
    except ValueError:
        parts = None
    fits = text.isascii() and " " not in text  # it goes into the request line and Host as it is
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not fits:
        raise ConfigError(f"{name}: expected an http:// or https:// URL with a host, got {text!r}")
    return text


def _subscriptions(raw: Any, name: str) -> tuple[SubscriptionSpec, ...]:
    try:
        return parse_subscriptions(raw, name)
    except SpecError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # attribute of Settings and key in the YAML file
    parse: Callable[[Any, str], Any]
    help: str
    # False: a key left without a value in the file (null) is refused rather than taken as "not set",
    # for settings whose default, silently used in place of the value meant, could lose messages.
    nullable: bool = True

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def default(self) -> Any:
        """Settings' default: declared there once, with the type."""
        return _DEFAULTS[self.name]


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "namesrv",
        _addr_list,
        "Name server addresses, comma-separated host:port (required "
        "unless --devbroker starts an embedded one).",
    ),
    Setting("http_addr", _addr, "HTTP API listen address."),
    Setting("grpc_addr", _addr, "gRPC API listen address."),
    Setting(
        "data_dir",
        _required_text,
        "Directory of the local RocksDB store (retry, delay, idempotency).",
        nullable=False,  # ./data in place of the volume meant: a store lost with the container
    ),
    Setting(
        "disk_reserve_mb",
        _reserve_mb,
        "Space set aside in data_dir (a reserve file) so that on a full disk the store can keep "
        "draining while new work gets 503; accepted again once twice this is free. At least 16 (the "
        "store's unflushed data is capped at this less 8, up to 64); 0 disables it.",
    ),
    Setting("producer_group", _group(), "Producer group announced to the brokers."),
    Setting("access_key", _text, "RocketMQ ACL access key (with secret_key)."),
    Setting("secret_key", _text, "RocketMQ ACL secret key (with access_key)."),
    Setting(
        "tls",
        _bool,
        "Connect to the name servers and brokers over TLS (Java's tls.enable), for servers whose "
        "tls.server.mode is permissive (the default) or enforcing.",
    ),
    Setting(
        "tls_ca_file",
        _text,
        "With tls: PEM CA certificates the servers' certificates must verify against (Java's "
        "tls.client.authServer with trustCertPath). Unset: not verified, as Java's default.",
    ),
    Setting(
        "tls_cert_file",
        _text,
        "With tls: the client's PEM certificate, for servers that require one "
        "(tls.server.need.client.auth=require).",
    ),
    Setting("tls_key_file", _text, "With tls_cert_file: its PEM private key (unencrypted)."),
    Setting(
        "auth_token",
        _text,
        "When set, every API call but /healthz and the API docs needs 'Authorization: Bearer <token>'.",
    ),
    Setting(
        "allow_remote_without_token",
        _bool,
        "Allow a non-loopback http_addr/grpc_addr without auth_token (anyone who can reach it may send; "
        "logged as a warning at start). Without it such a configuration is refused.",
    ),
    Setting(
        "probes_without_token",
        _bool,
        "Let gRPC health checks and server reflection answer without auth_token, like /healthz; "
        "by default they need it, as /readyz does.",
    ),
    Setting(
        "allowed_hosts",
        _name_list,
        "Host header names the HTTP API answers besides loopback ones (DNS-rebinding guard); * for any.",
    ),
    Setting(
        "allowed_origins",
        _name_list,
        "Browser origins (scheme://host:port) allowed to call the HTTP API besides loopback ones; "
        "requests from other origins get 403 (CSRF guard).",
    ),
    Setting(
        "read_timeout_s",
        _float(0.001, HOUR_S),
        "Longest a client may take to send one HTTP request (headers and body); slower ones are cut.",
    ),
    Setting(
        "max_connections",
        _int(1, 1_000_000),
        "Most open HTTP connections (one count for the hot routes and the rest); past it a new "
        "connection is answered 503 problem+json with 'connection: close' and counted in "
        "rocksidecar_http_connections_refused_total. Also the gRPC server's bound on its connections "
        "(grpc.max_allowed_incoming_connections: past it grpc core closes new ones unanswered).",
    ),
    Setting("send_timeout_ms", _int(1, 600_000), "Budget for one send including its retries."),
    Setting("retry_times", _int(0, 16), "Extra attempts of a send, each on another broker."),
    Setting("fault_tolerance", _bool, "Back off from slow or failing brokers (latency fault tolerance)."),
    Setting(
        "coalesce_sends",
        _bool,
        "Single messages that arrive while others are on their way to a broker go together, one broker "
        "batch per event-loop turn; each still gets its own answer, and a message finding nothing in "
        "flight goes at once. Off: one broker request per message.",
    ),
    Setting("queue_selector", _choice(*SelectorName), "Queue choice for messages without a sharding key."),
    Setting("environment_index", _int(0), "With queue_selector=environment: environment N uses queue N-1."),
    Setting("zone", _text, "With queue_selector=zone: prefer brokers whose name contains this tag."),
    Setting(
        "topics",
        _topic_list,
        "Allow-list of topics, comma-separated names or * patterns (orders-*): a send to any other topic "
        "is refused (400 naming `topic`) before anything is stored, so a mistyped topic is not "
        "auto-created. Routes of the plain names are loaded at start and /readyz waits for them. "
        "Unset: any valid topic.",
    ),
    Setting("max_body_bytes", _int(1, 64 * 1024 * 1024), "Largest accepted message body."),
    Setting("batch_limit", _int(1, 100_000), "Most messages in one batch request."),
    Setting("max_request_bytes", _int(1024, 1024**3), "Largest accepted batch request."),
    Setting("max_delay_ms", _int(1, MAX_DELAY_MS), "Longest accepted delivery delay."),
    Setting("idempotency_window_s", _int(1), "How long an Idempotency-Key answer is kept."),
    Setting("shutdown_grace_s", _float(0.0, HOUR_S), "On SIGTERM, how long in-flight work may take."),
    Setting(
        "replay_workers",
        _int(1, 1024),
        "Concurrent redelivery calls from the retry store (each sends up to 32 due messages as one batch).",
    ),
    Setting("log_level", _choice("debug", "info", "warning", "error"), "Logging level."),
    Setting("log_format", _choice("text", "json"), "Log lines as text, or JSON lines (stable field names)."),
    Setting("access_log", _bool, "Log one line per HTTP request (method, path, status, duration)."),
    Setting(
        "otel",
        _bool,
        "Export OpenTelemetry spans of the send path over OTLP, configured by the standard OTEL_* "
        "variables (needs the otel extra: pip install 'rocksidecar[otel]').",
    ),
    Setting(
        "msg_trace",
        _bool,
        "Write RocketMQ message trace records (the Java client's enableMsgTrace format) of sends and "
        "push deliveries to msg_trace_topic, batched in the background; never slows or fails a send.",
    ),
    Setting("msg_trace_topic", _topic, "The message trace topic (the brokers' default)."),
    Setting(
        "delay_late_log_ms", _int(0), "Log delayed messages published later than this after their due time."
    ),
    Setting(
        "recovery_replay_rate", _int(1), "Messages per second replayed early when a broker or route recovers."
    ),
    # --- subscriptions (issue 13): the sidecar consumes and pushes to the app ---
    Setting(
        "subscriptions",
        _subscriptions,
        "Topics the sidecar consumes for the app, pushed to it as CloudEvents over HTTP: a list of "
        "mappings whose keys are listed below (YAML list in the file; YAML/JSON text in the environment).",
    ),
    # transactional messages (issue 29): README "Transactions"
    Setting(
        "transactions_mode",
        _choice("broker", "local", "auto"),
        "Where POST /v1/transactions keeps a begun message: 'broker' (a RocketMQ half message; no broker: "
        "503), 'local' (the local outbox: synced here, spooled for delivery on commit) or 'auto' (a half "
        "message when a broker stores it, else the local outbox).",
    ),
    Setting(
        "transactions_check_endpoint",
        _local_url,
        "http:// URL on this machine the sidecar POSTs {id, transactionKey, topic} to when a transaction "
        "is undecided (a broker's check-back, or a local one past transactions_undecided_timeout_s); it "
        'answers {"state": "COMMIT" | "ROLLBACK" | "UNKNOWN"}. Empty: always UNKNOWN.',
    ),
    Setting(
        "transactions_undecided_timeout_s",
        _int(1, 30 * 24 * 3600),
        "A local-outbox transaction neither committed nor rolled back for this long is checked with "
        "transactions_check_endpoint (as a broker checks its halves), and again on each round after.",
    ),
    Setting(
        "transactions_group",
        _group(optional=True),
        "Producer group of the half messages, which brokers ask about undecided ones; empty: "
        "producer_group. Give each sidecar its own unless every app's check endpoint can answer for "
        "every transaction: a broker asks any one member of the group.",
    ),
    # Rock-DMQ service mode (issue 14)
    Setting(
        "delay_mode",
        _choice("local", "service"),
        "Where delayed messages wait: 'local' (this sidecar's store) or 'service' (forwarded to the "
        "Rock-DMQ service through its inner topic).",
    ),
    Setting(
        "dmq_inner_topic",
        _topic,
        "Rock-DMQ inner topic (service mode; `rocksidecar dmq --inner-topic`).",
        nullable=False,  # the default in place of the service's topic: delayed messages never published
    ),
    # read by `rocksidecar dmq` only, declared here so that one environment can run both commands
    Setting(
        "dmq_topics",
        _topic_list,
        "rocksidecar dmq: the real topics it may publish to, comma-separated patterns ('*' matches any "
        "run of characters); other inner messages are skipped and counted. Empty: every valid topic.",
    ),
    Setting(
        "dmq_group",
        _group(),
        "rocksidecar dmq: consumer group of the replicas (--group).",
        nullable=False,  # replicas in different groups would each consume every inner message
    ),
    Setting("dmq_http_addr", _addr, "rocksidecar dmq: /healthz, /readyz, /metrics (--http-addr)."),
    Setting(
        "dmq_instance",
        _text,
        "rocksidecar dmq: this replica's instance name, e.g. the pod name (--instance); empty: pid-based.",
    ),
    Setting(
        "dmq_replicas",
        _text,
        "rocksidecar dmq: every replica's instance name, comma-separated (--replicas); set: replicated "
        "mode (README 'Rock-DMQ replicas'). Empty: each replica owns what it consumed.",
    ),
    Setting(
        "dmq_copies",
        _int(0, 64),
        "rocksidecar dmq: replicas holding each message in replicated mode (--copies); 0: 2, or 1 with "
        "a single replica.",
    ),
    Setting(
        "dmq_marks_topic",
        _topic,
        "rocksidecar dmq: the topic of published marks in replicated mode (--marks-topic).",
        nullable=False,  # replicas reading different marks topics would not see each other's marks
    ),
)
_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The declaration of one setting (a command's flag that overrides it uses its env and default)."""
    return _BY_NAME[name]


@dataclass(frozen=True, slots=True)
class Settings:
    namesrv: tuple[str, ...] = ()
    http_addr: str = "127.0.0.1:9880"
    grpc_addr: str = "127.0.0.1:9881"
    data_dir: str = "./data"
    disk_reserve_mb: int = 64
    producer_group: str = "rocksidecar"
    access_key: str = ""
    secret_key: str = ""
    tls: bool = False
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    auth_token: str = ""
    allow_remote_without_token: bool = False
    probes_without_token: bool = False
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    read_timeout_s: float = 30.0
    max_connections: int = 4096
    send_timeout_ms: int = 3000
    retry_times: int = 2
    fault_tolerance: bool = True
    coalesce_sends: bool = True
    queue_selector: str = "round_robin"
    environment_index: int = 0
    zone: str = ""
    topics: tuple[str, ...] = ()
    max_body_bytes: int = 4 * 1024 * 1024
    batch_limit: int = 1000
    max_request_bytes: int = 64 * 1024 * 1024
    max_delay_ms: int = 90 * 24 * 3600 * 1000
    idempotency_window_s: int = 24 * 3600
    shutdown_grace_s: float = 20.0
    replay_workers: int = 16
    log_level: str = "info"
    log_format: str = "text"
    access_log: bool = False
    otel: bool = False
    msg_trace: bool = False
    msg_trace_topic: str = "RMQ_SYS_TRACE_TOPIC"
    delay_late_log_ms: int = 1000
    recovery_replay_rate: int = 50_000
    subscriptions: tuple[SubscriptionSpec, ...] = ()
    retry_default: RetryPolicy = field(default_factory=RetryPolicy)
    retry_types: Mapping[str, RetryPolicy] = field(default_factory=dict)
    dead_letter_webhook: str = ""
    transactions_mode: str = "broker"
    transactions_check_endpoint: str = ""
    transactions_undecided_timeout_s: int = 60
    transactions_group: str = ""
    # Rock-DMQ service mode (issue 14)
    delay_mode: str = "local"
    dmq_inner_topic: str = "dmq_inner_topic"
    dmq_topics: tuple[str, ...] = ()
    dmq_group: str = "dmq_service_group"
    dmq_http_addr: str = "127.0.0.1:9890"
    dmq_instance: str = ""
    dmq_replicas: str = ""
    dmq_copies: int = 0
    dmq_marks_topic: str = "dmq_marks_topic"

    @property
    def transaction_group(self) -> str:
        return self.transactions_group or self.producer_group

    @property
    def preloaded_topics(self) -> tuple[str, ...]:
        """The topics of ``topics`` that are names, not patterns: their routes are loaded at start."""
        return topic_allow.literal_topics(self.topics)

    def retry_policy(self, message_type: str) -> RetryPolicy:
        return self.retry_types.get(message_type, self.retry_default)


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Settings) if f.name in _BY_NAME}


RETRY_KEYS = ("default", "types", "dead_letter_webhook")  # of the YAML file's retry: section
POLICY_KEYS = ("ladder_s", "max_retries")  # of retry.default and each retry.types.<type>
LADDER_STEP_S = FloatRange(0.001, MAX_STEP_S)  # each rung of ladder_s
MAX_RETRIES = IntRange(0, 10_000)


def _keyed(raw: Any, where: str, keys: tuple[str, ...], expected: str) -> Mapping[str, Any]:
    """``raw`` as a mapping that holds none but ``keys``; otherwise a ConfigError naming ``where``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected {expected}")
    unknown = set(raw) - set(keys)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    return raw


def _retry_policy(raw: Any, where: str, base: RetryPolicy) -> RetryPolicy:
    raw = _keyed(raw, where, POLICY_KEYS, "a mapping with ladder_s and/or max_retries")
    ladder = base.ladder_s
    if "ladder_s" in raw:
        items = raw["ladder_s"]
        if not isinstance(items, list) or not items:
            raise ConfigError(f"{where}.ladder_s: expected a non-empty list of seconds")
        ladder = tuple(LADDER_STEP_S(v, f"{where}.ladder_s") for v in items)
    # Unset, the limit is the base's (RetryPolicy()'s 10 for default, the resolved default for a type), as
    # --help-settings and values.yaml say, never the ladder's length: a short ladder would otherwise
    # dead-letter every spooled message after a few seconds of outage (past its end the last rung repeats).
    max_retries = MAX_RETRIES(raw.get("max_retries", base.max_retries), f"{where}.max_retries")
    return RetryPolicy(ladder, max_retries)


def _retry_section(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    raw = _keyed(raw, "retry", RETRY_KEYS, "a mapping")
    default = _retry_policy(raw.get("default", {}), "retry.default", RetryPolicy())
    types_raw = raw.get("types") or {}
    if not isinstance(types_raw, Mapping):
        raise ConfigError("retry.types: expected a mapping of type name to policy")
    types = {str(k): _retry_policy(v, f"retry.types.{k}", default) for k, v in types_raw.items()}
    webhook = raw.get("dead_letter_webhook")
    webhook = "" if webhook is None else webhook  # `dead_letter_webhook:` (null): none, as if left out
    return {
        "retry_default": default,
        "retry_types": types,
        "dead_letter_webhook": _webhook_url(webhook, "retry.dead_letter_webhook"),
    }


def load_file(path: str | Path) -> dict[str, Any]:
    """The file's settings, read with app.settings_yaml.SettingsLoader: plain scalars as their text,
    null as None, a key given twice or nesting past sense refused."""
    try:
        doc = load_yaml(Path(path).read_bytes().decode("utf-8-sig"))  # a BOM some editors write: fine
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config: {path} is not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {path} is not valid YAML: {yaml_error_line(exc)}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"--config: {path} must hold a mapping of settings")
    return doc


SECTIONS = ("transactions",)  # the file's `transactions: {mode: ...}` is transactions_mode, and so on


def _flat_sections(doc: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, raw in doc.items():
        if key not in SECTIONS:
            flat[key] = raw
            continue
        if not isinstance(raw, Mapping):
            raise ConfigError(f"--config: {key}: expected a mapping")
        for inner, value in raw.items():
            name = f"{key}_{inner}"
            if name not in _BY_NAME:
                raise ConfigError(f"--config: unknown setting {key}.{inner}")
            if name in flat or name in doc:
                raise ConfigError(f"--config: {key}.{inner} is set twice")
            flat[name] = value
    return flat


def load(
    env: Mapping[str, str] | None = None,
    file: str | Path | None = None,
    *,
    require_namesrv: bool = True,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build Settings from defaults < YAML file < environment < explicit overrides (CLI flags)."""
    env = os.environ if env is None else env
    doc = load_file(file) if file else {}
    values: dict[str, Any] = {}
    for key, raw in _flat_sections(doc).items():
        if key == "retry":
            continue
        setting = _BY_NAME.get(key)
        if setting is None:
            raise ConfigError(f"--config: unknown setting {key!r}")
        if raw is None:  # `key:` with nothing after it: not set (never the text "None")
            if not setting.nullable:
                default = setting.default
                raise ConfigError(f"{key}: has no value (give one, or leave the key out for {default!r})")
            continue
        values[key] = setting.parse(raw, key)
    for setting in SETTINGS:
        if setting.env in env:
            values[setting.name] = setting.parse(env[setting.env], setting.env)
    known_env = {s.env for s in SETTINGS} | {CONFIG_ENV}
    stray = sorted(
        k
        for k in env
        if k.startswith(ENV_PREFIX) and k not in known_env and not k.startswith(ENV_PREFIX + "TEST_")
    )
    if stray:
        raise ConfigError(
            f"{stray[0]}: not a rocksidecar setting (known: see `rocksidecar serve --help-settings`)"
        )
    values.update(overrides or {})
    values.update(_retry_section(doc.get("retry")))
    settings = Settings(**values)
    _check(settings, require_namesrv)
    return settings


def _check_tls(s: Settings) -> None:
    """The TLS files load (each named when it does not), and none is set without tls."""
    files = ("tls_ca_file", "tls_cert_file", "tls_key_file")
    if not s.tls:
        for name in files:
            if getattr(s, name):
                raise ConfigError(f"{_BY_NAME[name].env}: set {_BY_NAME['tls'].env}=true to use it")
        return
    if s.tls_key_file and not s.tls_cert_file:
        raise ConfigError(f"{_BY_NAME['tls_key_file'].env}: needs {_BY_NAME['tls_cert_file'].env}")
    loads = (("tls_ca_file", (s.tls_ca_file,)), ("tls_cert_file", ("", s.tls_cert_file, s.tls_key_file)))
    for name, args in loads:
        path = getattr(s, name)
        if path:
            try:
                client_context(*args)
            except OSError as exc:  # ssl.SSLError too: a PEM that does not parse, a key not the cert's
                raise ConfigError(f"{_BY_NAME[name].env}: {path!r} does not load: {exc}") from None


def _check(s: Settings, require_namesrv: bool) -> None:
    if require_namesrv and not s.namesrv:
        raise ConfigError(f"{_BY_NAME['namesrv'].env}: required (or start with --devbroker)")
    if bool(s.access_key) != bool(s.secret_key):
        raise ConfigError("ROCKSIDECAR_ACCESS_KEY and ROCKSIDECAR_SECRET_KEY must be set together")
    _check_tls(s)
    if s.queue_selector == SelectorName.ENVIRONMENT and s.environment_index < 1:
        raise ConfigError("ROCKSIDECAR_ENVIRONMENT_INDEX: must be >= 1 with queue_selector=environment")
    if s.queue_selector == SelectorName.ZONE and not s.zone:
        raise ConfigError("ROCKSIDECAR_ZONE: required with queue_selector=zone")
    if not s.auth_token and not s.allow_remote_without_token:
        for name in ("http_addr", "grpc_addr"):
            host = getattr(s, name).rpartition(":")[0]
            if not is_loopback(host):
                raise ConfigError(
                    f"{_BY_NAME[name].env}: {host} is not a loopback address; set "
                    f"{_BY_NAME['auth_token'].env} (or {_BY_NAME['allow_remote_without_token'].env}=true "
                    "to let anyone who can reach it send messages)"
                )


# Settings of the YAML file's `retry:` section, which have no environment variable (listed by describe()).
YAML_ONLY: tuple[tuple[str, str], ...] = (
    (
        "retry.default.ladder_s",
        "Seconds to wait before each retry, rung by rung; the last rung repeats (default "
        f"[{', '.join(f'{v:g}' for v in RetryPolicy().ladder_s)}]).",
    ),
    (
        "retry.default.max_retries",
        f"Retries before a message becomes a dead letter (default {RetryPolicy().max_retries}).",
    ),
    (
        "retry.types.<type>",
        "ladder_s and/or max_retries for messages whose `type` is <type>; one left out is retry.default's.",
    ),
    ("retry.dead_letter_webhook", "URL that receives a POST for each new dead letter (default: none)."),
)


def describe() -> str:
    """A table of every setting, for --help-settings and the docs."""
    rows = [f"{CONFIG_ENV:<36} {'(--config)':<22} default none\n    Path of the optional YAML settings file."]
    rows.extend(f"{s.env:<36} {s.name:<22} default {s.default!r}\n    {s.help}" for s in SETTINGS)
    rows.append("\nOnly in the YAML file (--config or $" + CONFIG_ENV + "):")
    rows.extend(f"{key}\n    {text}" for key, text in YAML_ONLY)
    rows.append("\nKeys of each entry of subscriptions (* required):")
    for key, default in subscription_keys():
        shown = "*" if default is REQUIRED else f"default {default!r}"
        rows.append(f"{key:<22} {shown}\n    {SUBSCRIPTION_KEY_HELP.get(key, '')}")
    return "\n".join(rows)


SECRETS = frozenset({"secret_key", "auth_token", "access_key"})


def redacted(settings: Settings) -> dict[str, Any]:
    """Settings as they may be logged: secrets replaced, credentials in URLs removed."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if f.name in SECRETS:
            value = "<redacted>" if value else ""
        elif f.name == "dead_letter_webhook" and value:
            value = _strip_credentials(value)
        elif f.name == "retry_types":
            value = {
                k: {"ladder_s": list(v.ladder_s), "max_retries": v.max_retries} for k, v in value.items()
            }
        elif f.name == "retry_default":
            value = {"ladder_s": list(value.ladder_s), "max_retries": value.max_retries}
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _strip_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    if parts.username or parts.password:
        netloc = "<redacted>@" + netloc
    return urlunsplit((parts.scheme, netloc, parts.path, "<redacted>" if parts.query else "", ""))
