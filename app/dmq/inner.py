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

from rocksidecar.delay import DelayedMessage
from rocksidecar.rmq.message import RESERVED_PROPERTIES, Message, MessageExt

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


class InnerFormatError(ValueError):
    """An inner message that cannot be scheduled (no real topic, no or a bad due time)."""


@dataclass(frozen=True, slots=True)
class CancelRequest:
    id: str  # UNIQ_KEY of the message to cancel


def _int(props: Mapping[str, str], name: str) -> int:
    raw = props[name]
    try:
        return int(raw)
    except ValueError:
        raise InnerFormatError(f"{name}={raw!r} is not an integer") from None


def due_ms(props: Mapping[str, str], stored_ms: int) -> int:
    """The due time the properties ask for; relative delays count from ``stored_ms`` (the broker's
    store timestamp of the inner message)."""
    for name in (DELIVER_MS, TIMER_DELIVER_MS):
        if name in props:
            return _int(props, name)
    if TIMER_DELAY_MS in props:
        return stored_ms + _int(props, TIMER_DELAY_MS)
    if TIMER_DELAY_SEC in props:
        return stored_ms + _int(props, TIMER_DELAY_SEC) * 1000
    raise InnerFormatError(
        f"no due time: set {DELIVER_MS}, {TIMER_DELIVER_MS}, {TIMER_DELAY_MS} or {TIMER_DELAY_SEC}"
    )


def parse(msg: MessageExt, now_ms: int) -> DelayedMessage | CancelRequest:
    """The delayed message (or cancel) an inner message carries.

    Raises:
        InnerFormatError: it carries neither; the service logs and skips it (redelivering cannot help).
    """
    props = msg.properties
    if props.get(OP) == OP_CANCEL:
        target = props.get(CANCEL_ID)
        if not target:
            raise InnerFormatError(f"a cancel without {CANCEL_ID}")
        return CancelRequest(target)
    topic = props.get(REAL_TOPIC)
    if not topic:
        raise InnerFormatError(f"no {REAL_TOPIC}")
    id_ = msg.uniq_key
    if not id_:
        raise InnerFormatError("no UNIQ_KEY")
    user = {k: v for k, v in props.items() if k not in RESERVED_PROPERTIES and k not in FORMAT_PROPERTIES}
    return DelayedMessage(
        id=id_,
        topic=topic,
        body=msg.body,
        due_ms=due_ms(props, msg.store_timestamp_ms or now_ms),
        tags=msg.tags,
        keys=msg.keys,
        properties=user,
        sharding_key=props.get(SHARDING_KEY),
        created_ms=msg.born_timestamp_ms,
    )


def inner_message(
    real: Message, due_at_ms: int, *, inner_topic: str = DEFAULT_INNER_TOPIC, sharding_key: str | None = None
) -> Message:
    """``real`` (which must carry its id) wrapped for the inner topic, due at ``due_at_ms``. Send it with
    ``real.id`` as the sharding key."""
    if real.id is None:
        raise ValueError("the message needs its id (UNIQ_KEY): a cancel and the status refer to it")
    props = {**real.properties, REAL_TOPIC: real.topic, DELIVER_MS: str(due_at_ms)}
    if sharding_key is not None:
        props[SHARDING_KEY] = sharding_key
    return Message(inner_topic, real.body, tags=real.tags, keys=real.keys, properties=props, id=real.id)


def cancel_message(id_: str, *, inner_topic: str = DEFAULT_INNER_TOPIC) -> Message:
    """A cancel of message ``id_``; send it with ``id_`` as the sharding key."""
    return Message(inner_topic, b"cancel", properties={OP: OP_CANCEL, CANCEL_ID: id_})
