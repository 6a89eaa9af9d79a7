"""Options of ``spark.read``/``readStream.format("rocksidecar")``, parsed and checked on the driver so a
typo or a bad value fails the query before any task runs, with an error naming the option."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from .options import TOPIC, OptionError, canonical, integer

_GROUP = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")
_HOSTPORT = re.compile(r"^[A-Za-z0-9.\-]{1,253}:[0-9]{1,5}$")
MAX_TOPICS = 100
MAX_QUEUES = 10_000  # queues named by a per-queue offsets JSON
MAX_OPTION_CHARS = 1 << 20
DEFAULT_GROUP = "rocksidecar_spark"
# rmq.message_codec.MAX_BODY_BYTES (this module may not import rmq; a test checks they agree)
MAX_BODY_BYTES = 16 * 1024 * 1024
# The bounds a subscription's max_body_bytes has too (app.subscriptions.spec): above 1 GiB is no bound.
MIN_BODY_LIMIT, MAX_BODY_LIMIT = 1024, 1 << 30
KNOWN = {
    "namesrv",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "tags",
    "sql",
    "accessKey",
    "secretKey",
    "securityToken",
    "tls",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "failOnDataLoss",
    "group",
    "commitGroup",
    "brokerTimeoutMs",
    "pullBatchSize",
    "maxBodyBytes",
}

# an offset position: "earliest", "latest", a timestamp (ms), or per queue: topic -> "broker:queueId" -> n
Start = str | int | dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    starting: Start = "latest"
    ending: Start = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    tags: str | None = None
    sql: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    security_token: str | None = None
    tls: bool = False  # every connection over TLS (rmq.tls); the files are paths on the executors
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    fail_on_data_loss: bool = True
    group: str = DEFAULT_GROUP
    commit_group: str | None = None
    broker_timeout_s: float = 10.0
    pull_batch_size: int = 32
    max_body_bytes: int = MAX_BODY_BYTES  # a compressed body inflating past this is skipped, with a warning


def _canonical(options: Mapping[str, str]) -> dict[str, str]:
    out = canonical(options, KNOWN, "read option")
    for name, value in out.items():
        if len(value) > MAX_OPTION_CHARS:
            raise OptionError(f"option {name} is longer than {MAX_OPTION_CHARS} characters")
    return out


def parse_position(name: str, raw: str, topics: tuple[str, ...], *, allow_earliest: bool = True) -> Start:
    """``earliest``, ``latest``, a timestamp in ms since the epoch, or a JSON object
    ``{"topic": {"broker:queueId": offset}}`` (-2 earliest, -1 latest, as Kafka's)."""
    text = raw.strip()
    if text in ("earliest", "latest"):
        if text == "earliest" and not allow_earliest:
            raise OptionError(f"option {name}=earliest makes no sense: nothing would be read")
        return text
    if re.fullmatch(r"[0-9]{1,15}", text):
        return int(text)
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise OptionError(
            f"option {name}={raw[:80]!r} must be earliest, latest, a timestamp in ms or "
            '{"topic": {"broker:queueId": offset}}'
        )
    out: dict[str, dict[str, int]] = {}
    count = 0
    for topic, queues in doc.items():
        if topic not in topics:
            raise OptionError(f"option {name} names topic {topic!r}, which is not in option topic")
        if not isinstance(queues, dict):
            raise OptionError(f'option {name}: topic {topic!r} must map to {{"broker:queueId": offset}}')
        for queue, offset in queues.items():
            count += 1
            broker, sep, qid = str(queue).rpartition(":")
            # ASCII digits only: str.isdigit() takes '²' too, which int() then refuses naming no option
            if not sep or not broker or not re.fullmatch(r"[0-9]{1,6}", qid):
                raise OptionError(f"option {name}: queue {queue!r} of {topic!r} must be 'broker:queueId'")
            if isinstance(offset, bool) or not isinstance(offset, int) or not -2 <= offset < 1 << 62:
                raise OptionError(f"option {name}: offset of {topic!r} {queue!r} must be an integer >= -2")
        if count > MAX_QUEUES:
            raise OptionError(f"option {name} names more than {MAX_QUEUES} queues")
        out[topic] = {str(q): int(o) for q, o in queues.items()}
    return out


def _boolean(opts: Mapping[str, str], name: str, default: bool) -> bool:
    text = opts.get(name, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name}={opts[name]!r} must be true or false")
    return text == "true"


def parse(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Raises OptionError."""
    opts = _canonical(options)
    namesrv = opts.get("namesrv", "")
    addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
    if not addrs or len(addrs) > 16 or not all(_HOSTPORT.match(a) for a in addrs):
        raise OptionError(
            f"option namesrv={namesrv!r}: give the name server(s) as host:port[;host:port]"
            if namesrv
            else "option namesrv is required"
        )
    topics = tuple(t.strip() for t in opts.get("topic", "").split(",") if t.strip())
    if not topics:
        raise OptionError("option topic is required (one topic, or several separated by commas)")
    if len(topics) > MAX_TOPICS or len(set(topics)) != len(topics):
        raise OptionError(f"option topic: at most {MAX_TOPICS} topics, each once")
    for t in topics:
        if not TOPIC.match(t):
            raise OptionError(
                f"option topic: {t!r} is not a topic name (1-127 characters of [%|a-zA-Z0-9_-])"
            )
    if "endingOffsets" in opts and streaming:
        raise OptionError("option endingOffsets is for batch queries only (as with Spark's Kafka source)")
    if "maxOffsetsPerTrigger" in opts and not streaming:
        raise OptionError("option maxOffsetsPerTrigger is for streaming queries only")
    if "tags" in opts and "sql" in opts:
        raise OptionError("options tags and sql exclude each other: give one filter")
    for name in ("tags", "sql"):
        if name in opts and not opts[name].strip():
            raise OptionError(f"option {name} is empty")
    if ("accessKey" in opts) != ("secretKey" in opts):
        raise OptionError("options accessKey and secretKey go together")
    if "securityToken" in opts and "accessKey" not in opts:
        # signed only with the keys (broker_read.Cluster): alone it would be ignored
        raise OptionError("option securityToken needs options accessKey and secretKey")
    if "commitGroup" in opts and not streaming:
        # only a stream's source commit stores offsets: a batch query would ignore it
        raise OptionError("option commitGroup is for streaming queries only: a batch query commits nothing")
    fail = _boolean(opts, "failOnDataLoss", True)
    tls = _boolean(opts, "tls", False)
    for name in ("tlsCaFile", "tlsCertFile", "tlsKeyFile"):
        if name in opts and not tls:
            raise OptionError(f"option {name} needs option tls=true")
    if "tlsKeyFile" in opts and "tlsCertFile" not in opts:
        raise OptionError("option tlsKeyFile needs option tlsCertFile")
    for name in ("group", "commitGroup"):
        if name in opts and not _GROUP.match(opts[name]):
            raise OptionError(f"option {name}={opts[name]!r} must be 1-255 characters of [%|a-zA-Z0-9_-]")
    default_start = "latest" if streaming else "earliest"
    starting = parse_position("startingOffsets", opts.get("startingOffsets", default_start), topics)
    if not streaming and starting == "latest":
        raise OptionError(
            "option startingOffsets=latest makes no sense for a batch query: nothing would be read"
        )
    ending: Start = "latest"
    if "endingOffsets" in opts:
        ending = parse_position("endingOffsets", opts["endingOffsets"], topics, allow_earliest=False)
    if isinstance(starting, int) and isinstance(ending, int) and starting > ending:
        # a timestamp each: every queue's range would end before it starts (per queue offsets are
        # compared once the queues' offsets are known, source.BatchReader)
        raise OptionError(
            f"option startingOffsets={starting} is after endingOffsets={ending}: nothing would be read"
        )
    timeout_ms = integer(opts, "brokerTimeoutMs", 10_000, 100, 3_600_000)
    return ReadOptions(
        namesrv=";".join(addrs),
        topics=topics,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=integer(opts, "maxOffsetsPerTrigger", None, 1, 1 << 62),
        min_partitions=integer(opts, "minPartitions", None, 1, 100_000),
        tags=opts.get("tags"),
        sql=opts.get("sql"),
        access_key=opts.get("accessKey"),
        secret_key=opts.get("secretKey"),
        security_token=opts.get("securityToken"),
        tls=tls,
        tls_ca_file=opts.get("tlsCaFile", ""),
        tls_cert_file=opts.get("tlsCertFile", ""),
        tls_key_file=opts.get("tlsKeyFile", ""),
        fail_on_data_loss=fail,
        group=opts.get("group", DEFAULT_GROUP),
        commit_group=opts.get("commitGroup"),
        broker_timeout_s=(timeout_ms or 10_000) / 1000,
        pull_batch_size=integer(opts, "pullBatchSize", 32, 1, 1024) or 32,
        max_body_bytes=integer(opts, "maxBodyBytes", MAX_BODY_BYTES, MIN_BODY_LIMIT, MAX_BODY_LIMIT)
        or MAX_BODY_BYTES,
    )
