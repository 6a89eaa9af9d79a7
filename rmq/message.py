"""Message values: what a producer sends (Message), what a pull returns (MessageExt), and queues.

Properties travel as ``name\\x01value`` pairs joined by ``\\x02``; names and values containing either
separator are refused here rather than silently corrupted on the wire (protocol reference §3.5).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from .codes import DEFAULT_TOPIC
from .errors import InvalidMessageError

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
# a consumer's message sent back to its group's retry topic by itself (its send-back failed)
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"
_UNIQ_KEY_IS = PROPERTY_UNIQ_KEY + NAME_VALUE_SEP
_AND_WAIT = PROPERTY_SEP + PROPERTY_WAIT + NAME_VALUE_SEP + "true"

# MessageConst.STRING_HASH_SET: names Java's Message.putUserProperty refuses.
RESERVED_PROPERTIES = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        PROPERTY_KEYS,
        PROPERTY_TAGS,
        PROPERTY_WAIT,
        PROPERTY_DELAY,
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        PROPERTY_TRAN_MSG,
        PROPERTY_PGROUP,
        PROPERTY_MIN_OFFSET,
        PROPERTY_MAX_OFFSET,
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        PROPERTY_UNIQ_KEY,
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        PROPERTY_CLUSTER,
        "MSG_TYPE",
        "INNER_MULTI_DISPATCH",
        "INNER_MULTI_QUEUE_OFFSET",
        PROPERTY_SHARDING_KEY,
    }
)

TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")  # used with fullmatch: "$" would accept a final newline
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET (Java's Validators refuse to send to these) and the prefix of
# the brokers' own system topics.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
TOPIC_MAX_LEN = 127
PROPERTIES_MAX_BYTES = 32767  # the broker's bound on a stored message's properties (a Java short)
# The broker adds items of its own (CLUSTER=<its cluster's name>) before it counts a message's properties
# against PROPERTIES_MAX_BYTES, and a delayed message gets DELAY_* items when it is published: validate()
# leaves this much room, so that a message accepted now and sent later (spooled, delayed) is not refused
# by the broker then (RocketMQ 4.9.4 refused a lone message 67 bytes under the bound).
BROKER_ITEMS_BYTES = 256
PROPERTIES_LIMIT = PROPERTIES_MAX_BYTES - BROKER_ITEMS_BYTES
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


_VALID_TOPICS: set[str] = set()  # most traffic reuses a few topics: check each once
_VALID_TOPICS_MAX = 10_000


def validate_topic(topic: str, field_name: str = "topic") -> None:
    if topic in _VALID_TOPICS:
        return
    _check_topic(topic, field_name)
    if len(_VALID_TOPICS) < _VALID_TOPICS_MAX:
        _VALID_TOPICS.add(topic)


RETRY_PREFIX = "%RETRY%"  # a consumer group's retry topic (rmq.consumer.config names it too)


def validate_batch_topic(topic: str, field_name: str = "topic") -> None:
    """validate_topic, and no consumer group's retry topic: the brokers refuse a batch to one ("batch
    request does not support retry group"; consumers hand messages back to it one by one themselves).
    What the sidecar's send APIs and the Spark sink, which send in batches, take."""
    validate_topic(topic, field_name)
    if topic.startswith(RETRY_PREFIX):
        raise InvalidMessageError(
            f"topic {topic} is a consumer group's retry topic: the brokers take no batches to it, and the "
            "sidecar sends in batches (a consumer hands a message back to it by itself)",
            field=field_name,
        )


def _check_topic(topic: str, field_name: str) -> None:
    if not topic:
        raise InvalidMessageError("topic is empty", field=field_name)
    if len(topic) > TOPIC_MAX_LEN:
        raise InvalidMessageError(
            f"topic is {len(topic)} characters long; at most {TOPIC_MAX_LEN}", field=field_name
        )
    if not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidMessageError(
            f"topic {topic!r} may only contain characters [%|a-zA-Z0-9_-]", field=field_name
        )
    if topic == DEFAULT_TOPIC:
        raise InvalidMessageError(
            f"topic {DEFAULT_TOPIC} is the auto-create template, not a topic", field=field_name
        )
    if topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX):
        raise InvalidMessageError(f"sending to the system topic {topic} is forbidden", field=field_name)


def _check_text(value: str, field_name: str) -> None:
    if NAME_VALUE_SEP in value or PROPERTY_SEP in value:
        raise InvalidMessageError(
            f"{field_name} contains a protocol separator (\\x01 or \\x02)", field=field_name
        )


class Message(msgspec.Struct, gc=False):
    """A message to send. ``id`` is its UNIQ_KEY; the producer assigns one when it is None.

    Treat it as immutable. It is not frozen because one is built per message on the hot path, and a
    frozen dataclass takes 6x longer to construct (1.2 vs 0.2 us for seven fields). A Struct rather than
    a slots dataclass: its __init__ is C, about half the instructions (issue 32); equality and repr as
    before. Not tracked by the cyclic GC: it holds strings, bytes and a mapping of strings, through which
    no cycle can pass."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = msgspec.field(default_factory=dict)
    flag: int = 0
    id: str | None = None

    def validate(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        """Raise InvalidMessageError naming the field if the message cannot be sent as it is."""
        validate_topic(self.topic)
        if not self.body:
            raise InvalidMessageError("body is empty", field="body")
        if len(self.body) > max_body_bytes:
            raise InvalidMessageError(
                f"body is {len(self.body)} bytes; at most {max_body_bytes}", field="body"
            )
        if self.tags is not None:
            _check_text(self.tags, "tags")
        for i, key in enumerate(self.keys):
            if not key or any(c.isspace() for c in key):
                # KEYS is space-separated on the wire: a key with a space would become two keys.
                raise InvalidMessageError(
                    "a key must be non-empty and contain no white space", field=f"keys[{i}]"
                )
            _check_text(key, f"keys[{i}]")
        for name, value in self.properties.items():
            if not name:
                raise InvalidMessageError("property names must be non-empty", field="properties")
            if name in RESERVED_PROPERTIES:
                raise InvalidMessageError(
                    f"property name {name!r} is reserved by RocketMQ", field=f"properties.{name}"
                )
            _check_text(name, f"properties.{name}")
            _check_text(value, f"properties.{name}")
            if not value:
                # Java drops properties with empty values on parse; refuse rather than lose them.
                raise InvalidMessageError("property values must be non-empty", field=f"properties.{name}")
        if self.id is not None:
            _check_text(self.id, "id")
        if self._could_be_large() and self._wire_properties_size() > PROPERTIES_LIMIT:
            raise InvalidMessageError(
                f"properties exceed {PROPERTIES_LIMIT} bytes (the broker's {PROPERTIES_MAX_BYTES} less "
                f"{BROKER_ITEMS_BYTES} for its own)",
                field="properties",
            )

    def _could_be_large(self) -> bool:
        # Without properties or keys, and with short tags and id, the property string stays far
        # below the limit: skip measuring it.
        return bool(self.properties or self.keys or len(self.tags or "") > 1000 or len(self.id or "") > 1000)

    def _wire_properties_size(self) -> int:
        """Bytes of wire_properties() with a 32-character id, without building the string."""
        size = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in self.properties.items())
        if self.tags:
            size += len(PROPERTY_TAGS) + len(self.tags.encode()) + 2
        if self.keys:
            size += len(PROPERTY_KEYS) + sum(len(k.encode()) + 1 for k in self.keys) + 1
        return size + len(PROPERTY_UNIQ_KEY) + max(len(self.id or ""), 32) + 2 + len(PROPERTY_WAIT) + 5

    def wire_properties(self, uniq_key: str) -> str:
        """The serialized property string sent with this message, UNIQ_KEY included."""
        if not (self.properties or self.tags or self.keys):  # most messages: built directly, 4x faster
            return _UNIQ_KEY_IS + uniq_key + _AND_WAIT
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = " ".join(self.keys)
        props[PROPERTY_UNIQ_KEY] = uniq_key
        props[PROPERTY_WAIT] = "true"
        return encode_properties(props)


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(frozen=True, slots=True)
class MessageExt:
    """A message as stored by a broker (decoded from a pull or view-by-id body)."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    flag: int
    born_timestamp_ms: int
    born_host: str
    store_timestamp_ms: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    store_size: int
    properties: Mapping[str, str]
    offset_msg_id: str

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> tuple[str, ...]:
        raw = self.properties.get(PROPERTY_KEYS)
        return tuple(k for k in raw.split(" ") if k) if raw else ()

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def msg_id(self) -> str:
        """What Java's getMsgId() returns: UNIQ_KEY when present, else the offset id."""
        return self.uniq_key or self.offset_msg_id

    @property
    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in RESERVED_PROPERTIES}


# A pulled message is built once per message on the consume path, and a frozen dataclass's __init__ sets
# each of its 17 fields through object.__setattr__ by name (plus keyword matching at the call): half of
# decoding a 256-byte message (issue 32). ``stored_message`` sets the same slots through their
# descriptors, positionally; the result is an ordinary, equal, still frozen MessageExt.
_EXT_FIELDS = tuple(MessageExt.__dataclass_fields__)
assert len(_EXT_FIELDS) == 17, "stored_message sets each of MessageExt's fields: update it with them"
(_s_topic, _s_body, _s_queue_id, _s_queue_offset, _s_commit_log_offset, _s_sys_flag, _s_flag,
 _s_born_ts, _s_born_host, _s_store_ts, _s_store_host, _s_reconsume, _s_prepared, _s_crc, _s_size,
 _s_properties, _s_offset_msg_id) = (getattr(MessageExt, name).__set__ for name in _EXT_FIELDS)  # fmt: skip
_new = object.__new__


def stored_message(
    topic: str,
    body: bytes,
    queue_id: int,
    queue_offset: int,
    commit_log_offset: int,
    sys_flag: int,
    flag: int,
    born_timestamp_ms: int,
    born_host: str,
    store_timestamp_ms: int,
    store_host: str,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body_crc: int,
    store_size: int,
    properties: Mapping[str, str],
    offset_msg_id: str,
) -> MessageExt:
    """``MessageExt(...)`` with the same arguments in the same order, at about a third of the cost."""
    m = _new(MessageExt)
    _s_topic(m, topic)
    _s_body(m, body)
    _s_queue_id(m, queue_id)
    _s_queue_offset(m, queue_offset)
    _s_commit_log_offset(m, commit_log_offset)
    _s_sys_flag(m, sys_flag)
    _s_flag(m, flag)
    _s_born_ts(m, born_timestamp_ms)
    _s_born_host(m, born_host)
    _s_store_ts(m, store_timestamp_ms)
    _s_store_host(m, store_host)
    _s_reconsume(m, reconsume_times)
    _s_prepared(m, prepared_transaction_offset)
    _s_crc(m, body_crc)
    _s_size(m, store_size)
    _s_properties(m, properties)
    _s_offset_msg_id(m, offset_msg_id)
    return m


def wire_properties_of(messages: Sequence[Message], ids: Sequence[str]) -> list[str]:
    """Each message's ``wire_properties`` with its id (a batch's), those of a message with no
    properties, tags or keys (most) built in place rather than by a call each."""
    return [
        _UNIQ_KEY_IS + id + _AND_WAIT if not (m.properties or m.tags or m.keys) else m.wire_properties(id)
        for m, id in zip(messages, ids, strict=True)
    ]


def encode_properties(props: Mapping[str, str]) -> str:
    return PROPERTY_SEP.join(f"{k}{NAME_VALUE_SEP}{v}" for k, v in props.items() if v is not None)


def decode_properties(text: str) -> dict[str, str]:
    """Parse like Java's string2messageProperties: skip items without a name or a value."""
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(PROPERTY_SEP):
        name, sep, value = item.partition(NAME_VALUE_SEP)
        if sep and name and value:
            out[name] = value
    return out
