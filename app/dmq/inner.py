"""The inner message format of Rock-DMQ service mode (version 1; README "Rock-DMQ service mode").

A producer sends the message it wants delayed to the inner topic (default ``dmq_inner_topic``) as it
would send it to the real topic: same body, same UNIQ_KEY, tags, keys and user properties, plus:

- ``DMQ_REAL_TOPIC``: the topic to publish to when due (required);
- the due time, one of: ``DMQ_DELIVER_MS`` (absolute, epoch ms), or RocketMQ 5's timer properties
  ``TIMER_DELIVER_MS`` (absolute, epoch ms), ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` (relative to the
  time the broker stored the inner message, as 5.x counts them);
- optionally ``DMQ_SHARDING_KEY``: the sharding key the real message is published with.

It should be sent with the UNIQ_KEY as its sharding key, so that a cancel for it lands on the same inner
queue. A cancel is a message to the inner topic with ``DMQ_OP=CANCEL`` and ``DMQ_CANCEL_ID=<UNIQ_KEY>``.

When due, the real message goes out with the inner message's body byte for byte, its UNIQ_KEY, tags,
keys and user properties; the properties above and those the broker adds (CLUSTER, MIN/MAX_OFFSET, ...)
are not copied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from rocksidecar.delay import DelayedMessage
from rocksidecar.rmq.errors import InvalidMessageError
from rocksidecar.rmq.message import RESERVED_PROPERTIES, Message, MessageExt

from ..request import MAX_SHARDING_KEY_CHARS, RequestError, check_send_topic, parse_time_ms
from ..topic_allow import ALL_TOPICS, TopicAllowList
from ..wire import to_wire

FORMAT_VERSION = "1"
DEFAULT_INNER_TOPIC = "dmq_inner_topic"
DEFAULT_GROUP = "dmq_service_group"

REAL_TOPIC = "DMQ_REAL_TOPIC"
DELIVER_MS = "DMQ_DELIVER_MS"
SHARDING_KEY = "DMQ_SHARDING_KEY"
OP = "DMQ_OP"
CANCEL_ID = "DMQ_CANCEL_ID"
OP_CANCEL = "CANCEL"
# RocketMQ 5 timer messages (MessageConst.PROPERTY_TIMER_*): honoured so 5.x producers work on 4.x.
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"

# Never copied to the real message: the format's own fields, 5.x timer bookkeeping.
FORMAT_PROPERTIES = frozenset(
    {
        REAL_TOPIC,
        DELIVER_MS,
        SHARDING_KEY,
        OP,
        CANCEL_ID,
        TIMER_DELIVER_MS,
        TIMER_DELAY_MS,
        TIMER_DELAY_SEC,
        "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_DEL_UNIQKEY",
    }
)


# Longer digit strings are beyond parse_time_ms's epoch range whatever they say: not worth an int().
MAX_NUMBER_CHARS = 20
# An absolute due time may be this much beyond the maximum delay from now: the sidecar that accepted it
# (up to the maximum by its own clock) and this process do not share a clock, and a message it answered
# 2xx must not be refused here for a skew. Relative delays involve no second clock and get no slack.
CLOCK_SLACK_MS = 10 * 60 * 1000
# UNIQ_KEYs are 32 hex characters (Java's client and the sidecar make them so); other clients' ids get
# room, but an id is a key of the delay store and a label of every status answer, so it is bounded.
MAX_ID_CHARS = 128


class Reject(StrEnum):
    """Why an inner message was skipped (the ``reason`` label of rocksidecar_dmq_inner_rejected_total)."""

    NO_CANCEL_ID = "no_cancel_id"
    UNKNOWN_OP = "unknown_op"  # a DMQ_OP other than CANCEL (a later version's, a typo): not guessed at
    NO_TOPIC = "no_topic"
    BAD_TOPIC = "bad_topic"  # not a topic the send API would take (TBW102, SCHEDULE_TOPIC_XXXX, "a/b", ...)
    TOPIC_NOT_ALLOWED = "topic_not_allowed"  # valid, but outside ROCKSIDECAR_DMQ_TOPICS
    NO_ID = "no_uniq_key"
    BAD_ID = "bad_id"  # a UNIQ_KEY or DMQ_CANCEL_ID over MAX_ID_CHARS, or not printable ASCII
    BAD_SHARDING_KEY = "bad_sharding_key"  # DMQ_SHARDING_KEY empty or over MAX_SHARDING_KEY_CHARS
    NO_DUE_TIME = "no_due_time"
    BAD_NUMBER = "bad_number"  # not plain ASCII digits
    TOO_FAR = "too_far"  # beyond the HTTP API's maximum delay (or any epoch it accepts)
    UNSTORABLE = "unstorable"  # parsed, but the delay store could not encode it
    # the real message would not pass the send API's checks once published (an empty body, a key with
    # white space, properties over 32 767 bytes with DELAY_DUE_AT/DELAY_PUBLISHED_AT added, ...)
    BAD_MESSAGE = "bad_message"


class InnerFormatError(ValueError):
    """An inner message that cannot be scheduled; ``reason`` says why (a bounded set of labels)."""

    def __init__(self, detail: str, reason: Reject) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Rules:
    """What an inner message may ask for: at most the HTTP API's delay (``Settings.max_delay_ms``), to
    the real topics of the allow-list."""

    max_delay_ms: int
    topics: TopicAllowList = ALL_TOPICS


@dataclass(frozen=True, slots=True)
class CancelRequest:
    id: str  # UNIQ_KEY of the message to cancel


def _shown(raw: str) -> str:
    return repr(raw) if len(raw) <= 40 else f"{raw[:40]!r}... ({len(raw)} characters)"


def _number(props: Mapping[str, str], name: str) -> int:
    raw = props[name]
    # int() also takes a sign, spaces, underscores and non-ASCII (full-width, Arabic-Indic) digits: a
    # producer's bug, not a number another client would read the same way.
    if not (raw.isascii() and raw.isdigit()):
        raise InnerFormatError(f"{name}={_shown(raw)} is not plain digits", Reject.BAD_NUMBER)
    if len(raw) > MAX_NUMBER_CHARS:
        raise InnerFormatError(f"{name} has {len(raw)} digits: out of range", Reject.TOO_FAR)
    return int(raw)


def _epoch(value: int, name: str) -> int:
    """The HTTP API's range of epoch milliseconds (which also keeps the store's 64-bit fields)."""
    try:
        return parse_time_ms(value, name)
    except RequestError as exc:
        raise InnerFormatError(f"{name}={value}: {exc.detail}", Reject.TOO_FAR) from None


def _delay(value: int, name: str, max_delay_ms: int) -> int:
    if value > max_delay_ms:  # as the HTTP API's delayMs
        raise InnerFormatError(
            f"{name} asks for {value} ms, beyond the maximum of {max_delay_ms} ms", Reject.TOO_FAR
        )
    return value


def due_ms(props: Mapping[str, str], stored_ms: int, now_ms: int, max_delay_ms: int, lead_ms: int = 0) -> int:
    """The due time the properties ask for, by the delay store's clock (``now_ms``); relative delays
    count from ``stored_ms`` (the broker's store timestamp of the inner message). Within the HTTP API's
    limits: at most ``max_delay_ms`` ahead, as its delayMs and deliverAt (an absolute time with
    CLOCK_SLACK_MS more).

    The absolute times and ``stored_ms`` are wall times (the producer's, the broker's); the store's clock
    runs ``lead_ms`` ahead of the wall clock after a step back (SteadyClock.lead_ms): they are moved onto
    it, so they come due when the wall clock reaches them, not the step earlier."""
    for name in (DELIVER_MS, TIMER_DELIVER_MS):
        if name in props:
            at = _epoch(_number(props, name), name)
            _delay(at + lead_ms - now_ms, name, max_delay_ms + CLOCK_SLACK_MS)
            return at + lead_ms
    if TIMER_DELAY_MS in props:
        delay = _delay(_number(props, TIMER_DELAY_MS), TIMER_DELAY_MS, max_delay_ms)
        return _epoch(stored_ms + delay, TIMER_DELAY_MS) + lead_ms
    if TIMER_DELAY_SEC in props:
        # Bounded in seconds before the product: a huge count must not become a huger number first.
        sec = _delay(_number(props, TIMER_DELAY_SEC), TIMER_DELAY_SEC, max_delay_ms // 1000)
        return _epoch(stored_ms + sec * 1000, TIMER_DELAY_SEC) + lead_ms
    raise InnerFormatError(
        f"no due time: set {DELIVER_MS}, {TIMER_DELIVER_MS}, {TIMER_DELAY_MS} or {TIMER_DELAY_SEC}",
        Reject.NO_DUE_TIME,
    )


def real_topic(props: Mapping[str, str], allowed: TopicAllowList) -> str:
    """The real topic, if the send API would take it and the allow-list has it: a topic the brokers
    refuse (TBW102, SCHEDULE_TOPIC_XXXX, "a/b") would only climb the retry ladder to a dead letter."""
    topic = props.get(REAL_TOPIC)
    if not topic:
        raise InnerFormatError(f"no {REAL_TOPIC}", Reject.NO_TOPIC)
    try:
        check_send_topic(topic, REAL_TOPIC)  # as the send APIs
    except RequestError as exc:
        raise InnerFormatError(f"{REAL_TOPIC}: {exc.detail}", Reject.BAD_TOPIC) from None
    if not allowed.allows(topic):
        raise InnerFormatError(
            f"{REAL_TOPIC}={topic} is not in the allowed topics (ROCKSIDECAR_DMQ_TOPICS)",
            Reject.TOPIC_NOT_ALLOWED,
        )
    return topic


def _id(raw: str, name: str) -> str:
    if len(raw) > MAX_ID_CHARS or not (raw.isascii() and raw.isprintable()) or " " in raw:
        raise InnerFormatError(f"{name} {_shown(raw)} is not an id", Reject.BAD_ID)
    return raw


def _sharding_key(raw: str | None) -> str | None:
    if raw is not None and not 0 < len(raw) <= MAX_SHARDING_KEY_CHARS:
        raise InnerFormatError(
            f"{SHARDING_KEY} must have 1 to {MAX_SHARDING_KEY_CHARS} characters, got {len(raw)}",
            Reject.BAD_SHARDING_KEY,
        )
    return raw


def parse(msg: MessageExt, now_ms: int, rules: Rules, lead_ms: int = 0) -> DelayedMessage | CancelRequest:
    """The delayed message (or cancel) an inner message carries; ``now_ms``: the delay store's clock,
    ``lead_ms``: how far it runs ahead of the wall clock (DelayStore.lead_ms, see ``due_ms``).

    Raises:
        InnerFormatError: it carries neither, or asks for more than ``rules`` allow; the service logs
            and skips it (redelivering cannot help).
    """
    props = msg.properties
    op = props.get(OP)
    if op == OP_CANCEL:
        target = props.get(CANCEL_ID)
        if not target:
            raise InnerFormatError(f"a cancel without {CANCEL_ID}", Reject.NO_CANCEL_ID)
        return CancelRequest(_id(target, CANCEL_ID))
    if op is not None:
        raise InnerFormatError(f"{OP}={_shown(op)} is not an op of this version", Reject.UNKNOWN_OP)
    topic = real_topic(props, rules.topics)
    id_ = msg.uniq_key
    if not id_:
        raise InnerFormatError("no UNIQ_KEY", Reject.NO_ID)
    _id(id_, "UNIQ_KEY")
    user = {k: v for k, v in props.items() if k not in RESERVED_PROPERTIES and k not in FORMAT_PROPERTIES}
    # Created when the broker stored this copy, by the broker's clock: the refresher counts the copy's
    # age from it against the broker's retention (app.dmq.refresh). The born timestamp is the producer's
    # own number: one in the future (a skewed clock, any 64-bit value) kept the copy from ever being
    # refreshed, so that a replica losing its volume after the retention could not rebuild the message.
    stored_ms = msg.store_timestamp_ms or now_ms - lead_ms  # a wall time, as the broker's
    delayed = DelayedMessage(
        id=id_,
        topic=topic,
        body=msg.body,
        due_ms=due_ms(props, stored_ms, now_ms, rules.max_delay_ms, lead_ms),
        tags=msg.tags,
        keys=msg.keys,
        properties=user,
        sharding_key=_sharding_key(props.get(SHARDING_KEY)),
        created_ms=stored_ms,
    )
    _publishable(delayed)
    return delayed


def _publishable(delayed: DelayedMessage) -> None:
    """Raises InnerFormatError (BAD_MESSAGE) when the producer or the broker would refuse ``delayed`` at
    its due time: it would only be dead-lettered then."""
    try:
        # with the DELAY_* items it is published with; validate leaves room for the broker's own items
        to_wire(delayed.for_publish(delayed.due_ms)).validate()
    except InvalidMessageError as exc:
        raise InnerFormatError(f"the real message would be refused: {exc}", Reject.BAD_MESSAGE) from None


def inner_message(
    real: Message, due_at_ms: int, *, inner_topic: str = DEFAULT_INNER_TOPIC, sharding_key: str | None = None
) -> Message:
    """``real`` (which must carry its id) wrapped for the inner topic, due at ``due_at_ms``. Send it with
    ``real.id`` as the sharding key. The format's properties among ``real``'s are not carried (the
    service would not copy them to the real message either): an app's ``DMQ_OP=CANCEL`` would make the
    inner message a cancel of its ``DMQ_CANCEL_ID``, its ``TIMER_*`` or ``DMQ_SHARDING_KEY`` change
    when or how it is published."""
    if real.id is None:
        raise ValueError("the message needs its id (UNIQ_KEY): a cancel and the status refer to it")
    props = {k: v for k, v in real.properties.items() if k not in FORMAT_PROPERTIES}
    props |= {REAL_TOPIC: real.topic, DELIVER_MS: str(due_at_ms)}
    if sharding_key is not None:
        props[SHARDING_KEY] = sharding_key
    return Message(inner_topic, real.body, tags=real.tags, keys=real.keys, properties=props, id=real.id)


def cancel_message(id_: str, *, inner_topic: str = DEFAULT_INNER_TOPIC) -> Message:
    """A cancel of message ``id_``; send it with ``id_`` as the sharding key."""
    return Message(inner_topic, b"cancel", properties={OP: OP_CANCEL, CANCEL_ID: id_})
