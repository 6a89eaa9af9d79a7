"""Hostile inner messages (issue 27, items 4 and 5): due times and real topics are bounded and validated
as the HTTP API does; a bad message is skipped, counted and logged (throttled), never fails its batch."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence

import pytest

from rocksidecar.app import config
from rocksidecar.app.dmq import inner
from rocksidecar.app.dmq.consume import InnerListener
from rocksidecar.app.dmq.inner import InnerFormatError, Reject, Rules
from rocksidecar.app.topic_allow import TopicAllowList
from rocksidecar.delay import DelayedMessage, DelayStore
from rocksidecar.rmq.consumer import ConsumeStatus
from rocksidecar.rmq.message import DEFAULT_MAX_BODY_BYTES, MessageExt, MessageQueue
from rocksidecar.storage.errors import StorageError
from tests.delay.conftest import START_MS, Harness, make_harness
from tests.rmq.consumer.factory import stored

MAX_DELAY_MS = 90 * 24 * 3600 * 1000  # the HTTP API's default (ROCKSIDECAR_MAX_DELAY_MS)
RULES = Rules(MAX_DELAY_MS)
NOW = START_MS
QUEUE = MessageQueue("dmq_inner_topic", "b0", 0)


def ext(offset: int, **props: str) -> MessageExt:
    """An inner message as pulled: UNIQ_KEY U<offset>, stored at NOW, to ``orders`` unless told."""
    m = stored(offset, topic="dmq_inner_topic")
    return dataclasses.replace(
        m, store_timestamp_ms=NOW, properties={**m.properties, inner.REAL_TOPIC: "orders", **props}
    )


def reason(m: MessageExt, rules: Rules = RULES) -> Reject:
    with pytest.raises(InnerFormatError) as info:
        inner.parse(m, NOW, rules)
    return info.value.reason


def due(m: MessageExt, rules: Rules = RULES) -> int:
    item = inner.parse(m, NOW, rules)
    assert isinstance(item, DelayedMessage)
    return item.due_ms


NOT_PLAIN_DIGITS = [
    "",
    "-1000",
    "+1000",
    " 1000",
    "1000\n",
    "1_000",
    "\uff11\uff10\uff10\uff10",  # full-width digits: int() takes them
    "\u0661\u0660\u0660\u0660",  # Arabic-Indic digits: int() takes them too
    "1e3",
    "0x10",
    "abc",
]
ALL_DUE_PROPERTIES = [inner.DELIVER_MS, inner.TIMER_DELIVER_MS, inner.TIMER_DELAY_MS, inner.TIMER_DELAY_SEC]


@pytest.mark.parametrize("name", ALL_DUE_PROPERTIES)
@pytest.mark.parametrize("raw", NOT_PLAIN_DIGITS)
def test_a_due_time_that_is_not_plain_ascii_digits_is_refused(name: str, raw: str) -> None:
    assert reason(ext(1, **{name: raw})) is Reject.BAD_NUMBER


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        (inner.DELIVER_MS, "20000000000000000000"),  # beyond 64 bits: orjson used to raise
        (inner.DELIVER_MS, "1" * 31),
        (inner.DELIVER_MS, "9" * 5000),  # beyond int()'s own digit limit
        (inner.DELIVER_MS, str(NOW + MAX_DELAY_MS + inner.CLOCK_SLACK_MS + 1)),
        (inner.TIMER_DELIVER_MS, str(10**16)),  # beyond the HTTP API's epoch range
        (inner.TIMER_DELAY_MS, str(MAX_DELAY_MS + 1)),
        (inner.TIMER_DELAY_MS, "9223372036854775807"),
        (inner.TIMER_DELAY_SEC, "9223372036854775807"),
        (inner.TIMER_DELAY_SEC, str(MAX_DELAY_MS // 1000 + 1)),
    ],
)
def test_a_due_time_beyond_the_http_apis_maximum_delay_is_refused(name: str, raw: str) -> None:
    assert reason(ext(1, **{name: raw})) is Reject.TOO_FAR


def test_due_times_up_to_the_maximum_delay_are_taken() -> None:
    assert due(ext(1, **{inner.DELIVER_MS: str(NOW + MAX_DELAY_MS)})) == NOW + MAX_DELAY_MS
    # what a sidecar accepted at the maximum by a clock somewhat ahead of this one
    ahead = NOW + MAX_DELAY_MS + inner.CLOCK_SLACK_MS
    assert due(ext(1, **{inner.TIMER_DELIVER_MS: str(ahead)})) == ahead
    assert due(ext(1, **{inner.TIMER_DELAY_MS: str(MAX_DELAY_MS)})) == NOW + MAX_DELAY_MS
    assert due(ext(1, **{inner.TIMER_DELAY_SEC: str(MAX_DELAY_MS // 1000)})) == NOW + MAX_DELAY_MS
    assert due(ext(1, **{inner.DELIVER_MS: "0"})) == 0  # in the past: due now, as deliverAt
    assert due(ext(1, **{inner.TIMER_DELAY_MS: "0001500"})) == NOW + 1500


def test_the_maximum_delay_is_the_configured_one() -> None:
    short = Rules(60_000)
    assert due(ext(1, **{inner.TIMER_DELAY_SEC: "60"}), short) == NOW + 60_000
    assert reason(ext(1, **{inner.TIMER_DELAY_SEC: "61"}), short) is Reject.TOO_FAR
    too_far = NOW + 60_000 + inner.CLOCK_SLACK_MS + 1
    assert reason(ext(1, **{inner.DELIVER_MS: str(too_far)}), short) is Reject.TOO_FAR


@pytest.mark.parametrize(
    "topic",
    [
        "TBW102",
        "a b/../c",
        "x" * 200,
        "SCHEDULE_TOPIC_XXXX",
        "rmq_sys_trace",
        "orders\n",
        "ordérs",
        "%RETRY%G",
    ],
)
def test_a_real_topic_the_send_api_refuses_is_refused(topic: str) -> None:
    assert reason(ext(1, **{inner.REAL_TOPIC: topic, inner.DELIVER_MS: str(NOW)})) is Reject.BAD_TOPIC


def test_missing_fields_have_their_own_reasons() -> None:
    no_topic = ext(1, **{inner.DELIVER_MS: str(NOW)})
    no_topic = dataclasses.replace(
        no_topic, properties={k: v for k, v in no_topic.properties.items() if k != inner.REAL_TOPIC}
    )
    assert reason(no_topic) is Reject.NO_TOPIC
    assert reason(ext(1)) is Reject.NO_DUE_TIME
    assert reason(ext(1, **{inner.OP: inner.OP_CANCEL})) is Reject.NO_CANCEL_ID


@pytest.mark.parametrize("bad", ["x" * (inner.MAX_ID_CHARS + 1), "a b", "id\x00", "\u0661\u0662", "id\n"])
def test_an_id_that_is_no_id_is_refused(bad: str) -> None:
    """A UNIQ_KEY or DMQ_CANCEL_ID is a key of the store and of every status answer: bounded, printable."""
    message = ext(1, **{inner.DELIVER_MS: str(NOW)})
    props = {**message.properties, "UNIQ_KEY": bad}
    assert reason(dataclasses.replace(message, properties=props)) is Reject.BAD_ID
    assert reason(ext(2, **{inner.OP: inner.OP_CANCEL, inner.CANCEL_ID: bad})) is Reject.BAD_ID


def test_ids_up_to_the_bound_are_taken() -> None:
    longest = "A" * inner.MAX_ID_CHARS
    message = ext(1, **{inner.DELIVER_MS: str(NOW)})
    taken = inner.parse(
        dataclasses.replace(message, properties={**message.properties, "UNIQ_KEY": longest}), NOW, RULES
    )
    assert isinstance(taken, DelayedMessage) and taken.id == longest
    cancel = inner.parse(ext(2, **{inner.OP: inner.OP_CANCEL, inner.CANCEL_ID: longest}), NOW, RULES)
    assert cancel == inner.CancelRequest(longest)


@pytest.mark.parametrize("key", ["", "k" * (inner.MAX_SHARDING_KEY_CHARS + 1)])
def test_a_sharding_key_empty_or_too_long_is_refused(key: str) -> None:
    assert reason(ext(1, **{inner.DELIVER_MS: str(NOW), inner.SHARDING_KEY: key})) is Reject.BAD_SHARDING_KEY
    longest = "k" * inner.MAX_SHARDING_KEY_CHARS
    assert due(ext(1, **{inner.DELIVER_MS: str(NOW), inner.SHARDING_KEY: longest})) == NOW


def test_the_allow_list_limits_the_real_topics() -> None:
    rules = Rules(MAX_DELAY_MS, TopicAllowList.of(["orders_*", "payments", "*_audit"]))
    for topic in ("orders_eu", "orders_", "payments", "billing_audit"):
        assert due(ext(1, **{inner.REAL_TOPIC: topic, inner.DELIVER_MS: str(NOW)}), rules) == NOW
    for topic in ("orders", "payments2", "xpayments", "Orders_eu", "audit"):
        m = ext(1, **{inner.REAL_TOPIC: topic, inner.DELIVER_MS: str(NOW)})
        assert reason(m, rules) is Reject.TOPIC_NOT_ALLOWED, topic
    # an allowed pattern never lets an invalid topic through
    anything = Rules(MAX_DELAY_MS, TopicAllowList.of(["*"]))
    assert (
        reason(ext(1, **{inner.REAL_TOPIC: "TBW102", inner.DELIVER_MS: str(NOW)}), anything)
        is Reject.BAD_TOPIC
    )


@pytest.mark.parametrize("pattern", ["", "a?b", "[ab]", "a b", "TBW102", "SCHEDULE_TOPIC_XXXX", "x" * 128])
def test_a_pattern_no_topic_could_match_as_written_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="pattern"):
        TopicAllowList.of([pattern])


def test_the_setting_reads_comma_separated_patterns() -> None:
    env = {"ROCKSIDECAR_DMQ_TOPICS": " orders_* ,payments,"}
    assert config.load(env, require_namesrv=False).dmq_topics == ("orders_*", "payments")
    assert config.load({}, require_namesrv=False).dmq_topics == ()
    with pytest.raises(
        config.ConfigError, match=r"ROCKSIDECAR_DMQ_TOPICS: 'a\?b' is not a topic or a \* pattern"
    ):
        config.load({"ROCKSIDECAR_DMQ_TOPICS": "orders,a?b"}, require_namesrv=False)


def test_the_setting_is_listed_by_help_settings() -> None:
    assert "ROCKSIDECAR_DMQ_TOPICS" in config.describe()


# --- the listener: one bad message never fails its batch -----------------------------------------------
class PoisonStore(DelayStore):
    """Refuses to encode a batch holding the id ``poison``, as orjson did a due time beyond 64 bits."""

    calls: list[int]

    async def schedule_many(self, msgs: Sequence[DelayedMessage]) -> None:
        self.calls.append(len(msgs))
        if any(m.id == "poison" for m in msgs):
            raise TypeError("Integer exceeds 64-bit range")
        await super().schedule_many(msgs)


@dataclasses.dataclass
class Listened:
    h: Harness
    listener: InnerListener
    outcomes: dict[str, int]
    rejected: list[Reject]
    clock: list[float]


@pytest.fixture
async def listened() -> AsyncIterator[Listened]:
    h = make_harness()
    await h.store.close()
    h.store = PoisonStore(h.kv, h.writer, now_ms=h.clock.now_ms, clock=h.clock.monotonic)
    h.store.calls = []
    outcomes: dict[str, int] = {}
    rejected: list[Reject] = []
    clock = [0.0]

    def count(outcome: str, n: int) -> None:
        outcomes[outcome] = outcomes.get(outcome, 0) + n

    listener = InnerListener(h.store, RULES, count=count, rejected=rejected.append, clock=lambda: clock[0])
    yield Listened(h, listener, outcomes, rejected, clock)
    await h.store.close()
    await h.writer.close()


def good(offset: int) -> MessageExt:
    return ext(offset, **{inner.DELIVER_MS: str(NOW + 1000)})


async def test_one_bad_message_does_not_fail_its_batch(listened: Listened) -> None:
    batch = [good(1), ext(2, **{inner.DELIVER_MS: "20000000000000000000"}), good(3)]
    batch += [ext(4, **{inner.REAL_TOPIC: "TBW102", inner.DELIVER_MS: str(NOW)}), good(5)]
    assert await listened.listener(batch, QUEUE) is ConsumeStatus.SUCCESS
    store = listened.h.store
    assert [store.get(f"U{i:08d}") is not None for i in range(1, 6)] == [True, False, True, False, True]
    assert listened.rejected == [Reject.TOO_FAR, Reject.BAD_TOPIC]
    assert listened.outcomes == {"scheduled": 3, "malformed": 2}


async def test_a_message_the_store_cannot_encode_is_skipped_alone(listened: Listened) -> None:
    poison = dataclasses.replace(good(2), properties={**good(2).properties, "UNIQ_KEY": "poison"})
    assert await listened.listener([good(1), poison, good(3)], QUEUE) is ConsumeStatus.SUCCESS
    assert listened.h.store.get("U00000001") is not None and listened.h.store.get("U00000003") is not None
    assert listened.h.store.get("poison") is None
    assert listened.rejected == [Reject.UNSTORABLE]
    assert listened.outcomes == {"scheduled": 2, "malformed": 1}
    assert isinstance(listened.h.store, PoisonStore)
    assert listened.h.store.calls == [3, 1, 1, 1]  # the batch, then one by one


async def test_a_store_failure_still_fails_the_batch(listened: Listened) -> None:
    listened.h.kv.write_fault = "disk gone"
    with pytest.raises(StorageError):
        await listened.listener([good(1), good(2)], QUEUE)
    assert listened.rejected == []


async def test_rejections_are_logged_once_per_reason_and_window(
    listened: Listened, caplog: pytest.LogCaptureFixture
) -> None:
    bad = [ext(i, **{inner.DELIVER_MS: "-1"}) for i in range(1, 4)]
    with caplog.at_level(logging.WARNING, logger="rocksidecar.app.dmq.consume"):
        await listened.listener(bad, QUEUE)
        await listened.listener([ext(9, **{inner.REAL_TOPIC: "TBW102", inner.DELIVER_MS: "1"})], QUEUE)
        listened.clock[0] += 10.0
        await listened.listener([ext(5, **{inner.DELIVER_MS: "+1"})], QUEUE)
    lines = [(r.getMessage(), getattr(r, "reason", None)) for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0][1] == "bad_number" and "DMQ_DELIVER_MS='-1' is not plain digits" in lines[0][0]
    assert lines[1][1] == "bad_topic"
    assert lines[2][1] == "bad_number" and "(2 more for this reason since the last such line)" in lines[2][0]
    assert len(listened.rejected) == 5


@pytest.mark.parametrize("op", ["cancel", "MARK", "BEAT", "RESCHEDULE", "", "CANCEL "])
def test_an_op_the_format_does_not_know_is_refused(op: str) -> None:
    """Version 1 knows one DMQ_OP, CANCEL. A message with another one was scheduled as a delayed message
    when it also named a real topic and a due time: a later version's op (or a typo of CANCEL) must be
    skipped, not applied as something else."""
    m = ext(1, **{inner.OP: op, inner.DELIVER_MS: str(NOW + 1000), inner.CANCEL_ID: "U00000009"})
    assert reason(m) is Reject.UNKNOWN_OP


async def test_a_message_with_an_unknown_op_is_skipped_and_counted(listened: Listened) -> None:
    odd = ext(2, **{inner.OP: "RESCHEDULE", inner.DELIVER_MS: str(NOW + 1000)})
    assert await listened.listener([good(1), odd, good(3)], QUEUE) is ConsumeStatus.SUCCESS
    assert listened.h.store.get("U00000002") is None
    assert listened.rejected == [Reject.UNKNOWN_OP]
    assert listened.outcomes == {"scheduled": 2, "malformed": 1}


SEND_API_REFUSES = {
    "empty-body": ({}, b""),
    "body-over-4-MiB": ({}, b"x" * (DEFAULT_MAX_BODY_BYTES + 1)),
    "key-with-a-tab": ({"KEYS": "a\tb"}, b"b"),
    "empty-property-value": ({"p": ""}, b"b"),
    # within the broker's 32 767 bytes as sent, beyond once DELAY_DUE_AT and DELAY_PUBLISHED_AT are added
    "properties-full-once-published": ({"p": "v" * 32_700}, b"b"),
}


@pytest.mark.parametrize(("props", "body"), SEND_API_REFUSES.values(), ids=SEND_API_REFUSES.keys())
def test_a_message_the_send_api_would_refuse_is_refused_at_intake(props: dict[str, str], body: bytes) -> None:
    """These were scheduled (counted "scheduled", kept up to 90 days) and refused by the producer's own
    check at the due time: dead-lettered then, not skipped at intake as the README says."""
    m = dataclasses.replace(ext(1, **{inner.DELIVER_MS: str(NOW + 1000), **props}), body=body)
    assert reason(m) is Reject.BAD_MESSAGE
