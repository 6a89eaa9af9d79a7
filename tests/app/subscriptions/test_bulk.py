"""BulkPush: Dapr's bulk subscribe envelope and how the app's per-entry statuses become per-message
consume statuses."""

from __future__ import annotations

import base64
import dataclasses
from typing import cast

import orjson
import pytest

from rocksidecar.app.http_client import Answer, HttpClient, PostError
from rocksidecar.app.subscriptions.bulk import BULK_EVENT_TYPE, BulkPush, statuses_from
from rocksidecar.app.subscriptions.spec import SpecError, SubscriptionSpec, parse_one
from rocksidecar.app.tracing import msgtrace
from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.message import MessageExt
from tests.app.subscriptions.test_push import MQ, Recorded
from tests.app.subscriptions.test_stream import TraceRecords
from tests.rmq.consumer.factory import stored

SPEC = SubscriptionSpec(name="orders", topic="T", group="G", endpoint="http://127.0.0.1:9/in", bulk=True)
OK, LATER, DEAD = ConsumeStatus.SUCCESS, ConsumeStatus.RECONSUME_LATER, ConsumeStatus.DEAD_LETTER


def batch() -> list[MessageExt]:
    raw = stored(40, b"\x00\xffraw", queue_id=3)
    as_json = stored(41, b'{"a": 1}', queue_id=3)
    as_json = dataclasses.replace(
        as_json, properties={**as_json.properties, "content-type": "application/json"}
    )
    text = stored(42, "é text".encode(), queue_id=3)
    text = dataclasses.replace(
        text, properties={**text.properties, "content-type": "text/plain; charset=utf-8"}
    )
    return [raw, as_json, text]


def bulk(rec: Recorded) -> BulkPush:
    return BulkPush(
        SPEC,
        cast(HttpClient, rec),
        on_delivery=lambda _s, outcome, _t, _p: rec.outcomes.append(outcome),
        sleep=rec.sleep,
        wall_s=lambda: 1_800_000_000.0,
    )


def answer(*pairs: tuple[str, str]) -> Answer:
    return Answer(200, {}, orjson.dumps({"statuses": [{"entryId": e, "status": s} for e, s in pairs]}))


async def test_one_post_carries_dapr_s_envelope_with_structured_events() -> None:
    rec = Recorded([answer(("40", "SUCCESS"), ("41", "SUCCESS"), ("42", "SUCCESS"))])
    assert await bulk(rec)(batch(), MQ) == [OK, OK, OK]
    assert len(rec.requests) == 1
    req = rec.requests[0]
    assert req.headers["content-type"] == "application/json"
    body = orjson.loads(req.body)
    assert (body["type"], body["topic"], body["pubsubname"]) == (BULK_EVENT_TYPE, "T", "orders")
    assert body["metadata"] == {"rocketmqgroup": "G", "rocketmqbroker": "broker-a", "rocketmqqueue": "3"}
    assert [e["entryId"] for e in body["entries"]] == ["40", "41", "42"]
    assert {e["contentType"] for e in body["entries"]} == {"application/cloudevents+json"}
    raw, as_json, text = (e["event"] for e in body["entries"])
    assert base64.b64decode(raw["data_base64"]) == b"\x00\xffraw"  # byte-exact
    assert raw["datacontenttype"] == "application/octet-stream" and "data" not in raw
    assert as_json["data"] == {"a": 1}
    assert text["data"] == "é text"
    assert (raw["specversion"], raw["id"], raw["rocketmqoffset"]) == ("1.0", "U00000040", "40")
    assert rec.outcomes == ["ok", "ok", "ok"]


async def test_an_entry_born_past_rfc_3339_s_years_has_no_time_and_the_others_do() -> None:
    """A producer's born timestamp of 2**62 failed the whole batch's POST, every time (see test_push)."""
    msgs = batch()
    msgs[1] = dataclasses.replace(msgs[1], born_timestamp_ms=2**62)
    rec = Recorded([answer(("40", "SUCCESS"), ("41", "SUCCESS"), ("42", "SUCCESS"))])
    assert await bulk(rec)(msgs, MQ) == [OK, OK, OK]
    events = [e["event"] for e in orjson.loads(rec.requests[0].body)["entries"]]
    assert ["time" in e for e in events] == [True, False, True]
    assert events[1]["data"] == {"a": 1} and events[1]["id"] == "U00000041"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("depth", [300, 1000])
async def test_json_nested_deeper_than_can_be_written_goes_as_bytes_and_its_batch_goes_on(depth: int) -> None:
    """orjson reads JSON nested up to 1024 levels and writes only 254: such a body (any producer can
    send one) failed its whole batch before the POST, every time, its neighbours sent back unseen until
    they reached the DLQ. It goes as data_base64, as a body that is not JSON does; the others as before."""
    msgs = batch()
    for offset, kind, body in [
        (43, "application/json", nested(depth)),
        (44, "application/x+json", nested(100)),
    ]:
        msg = stored(offset, body, queue_id=3)
        msgs.append(dataclasses.replace(msg, properties={**msg.properties, "content-type": kind}))
    rec = Recorded([answer(*((str(o), "SUCCESS") for o in range(40, 45)))])
    assert await bulk(rec)(msgs, MQ) == [OK] * 5
    assert len(rec.requests) == 1
    events = [e["event"] for e in orjson.loads(rec.requests[0].body)["entries"]]
    assert [e["rocketmqoffset"] for e in events] == ["40", "41", "42", "43", "44"]
    raw, as_json, text, deep, shallow = events
    assert base64.b64decode(deep["data_base64"]) == nested(depth) and "data" not in deep  # byte-exact
    assert deep["datacontenttype"] == "application/json"  # what the producer said it is
    assert shallow["data"] == orjson.loads(nested(100))  # nested, but not too deep to write: JSON
    assert base64.b64decode(raw["data_base64"]) == b"\x00\xffraw"
    assert (as_json["data"], text["data"]) == ({"a": 1}, "é text")
    assert rec.outcomes == ["ok"] * 5


async def test_each_entry_gets_its_own_status_and_missing_or_unknown_ones_retry() -> None:
    rec = Recorded([answer(("40", "SUCCESS"), ("41", "DROP"), ("43", "SUCCESS"), ("42", "MAYBE"))])
    assert await bulk(rec)(batch(), MQ) == [OK, DEAD, LATER]
    assert rec.outcomes == ["ok", "dropped", "failed"]
    two = [*batch()[:2], stored(44)]
    assert statuses_from(orjson.dumps({"statuses": [{"entryId": "40", "status": "retry"}]}), two) == [
        LATER,
        LATER,
        LATER,
    ]


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"statuses": 5}', b'{"statuses": [7]}'])
def test_an_answer_without_usable_statuses_retries_everything(body: bytes) -> None:
    assert statuses_from(body, batch()) == [LATER, LATER, LATER]


async def test_a_failed_post_fails_every_entry() -> None:
    rec = Recorded([Answer(500), PostError("no answer within 15 s")])
    push = bulk(rec)
    assert await push(batch(), MQ) == [LATER] * 3
    assert await push(batch(), MQ) == [LATER] * 3
    assert rec.outcomes == ["failed"] * 3 + ["error"] * 3


async def test_429_waits_and_posts_the_whole_batch_again() -> None:
    rec = Recorded(
        [Answer(429, {"retry-after": "7"}), answer(("40", "SUCCESS"), ("41", "SUCCESS"), ("42", "SUCCESS"))]
    )
    assert await bulk(rec)(batch(), MQ) == [OK, OK, OK]
    assert rec.sleeps == [7.0]
    assert rec.requests[0].body == rec.requests[1].body


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ({"bulk": "maybe"}, "[0].bulk: expected true or false"),
        ({"bulk": True, "mode": "orderly"}, "[0].bulk: only with mode: concurrent"),
        ({"bulk": True, "endpoint": "grpc"}, "[0].bulk: only with an http endpoint"),
        ({"bulk": True, "bulk_max_messages": 0}, "[0].bulk_max_messages: must be between 1 and 1024"),
    ],
)
def test_bad_bulk_settings_name_the_key(entry: dict[str, object], names: str) -> None:
    good = {"name": "o", "topic": "T", "group": "G", "endpoint": "http://127.0.0.1:1/x"}
    with pytest.raises(SpecError, match=names.replace("[", r"\[").replace("]", r"\]")):
        parse_one({**good, **entry}, "subs[0]")


def test_a_bulk_subscription_consumes_in_batches() -> None:
    from rocksidecar.app.subscriptions.runner import consumer_config

    spec = parse_one(
        {
            "name": "o",
            "topic": "T",
            "group": "G",
            "endpoint": "http://127.0.0.1:1/x",
            "bulk": "true",
            "bulk_max_messages": 32,
        },
        "s",
    )
    assert (spec.bulk, spec.bulk_max_messages) == (True, 32)
    assert consumer_config(spec).consume_batch_size == 32
    assert consumer_config(dataclasses.replace(spec, bulk=False)).consume_batch_size == 1


def test_an_entry_named_twice_with_different_statuses_retries() -> None:
    """The app's answer names entry 40 SUCCESS and then RETRY: which did it mean? Before, the first named
    won, so a message the app also asked to retry was committed. Named twice alike, the status stands."""
    body = orjson.dumps(
        {
            "statuses": [
                {"entryId": "40", "status": "SUCCESS"},
                {"entryId": "41", "status": "DROP"},
                {"entryId": "42", "status": "SUCCESS"},
                {"entryId": "40", "status": "RETRY"},
                {"entryId": "41", "status": "SUCCESS"},
                {"entryId": "42", "status": "success"},
            ]
        }
    )
    assert statuses_from(body, batch()) == [LATER, LATER, OK]


@pytest.mark.parametrize("status", ["\u017fuccess", "DRO\u0440", "SUCCESS ", 1, None, ["SUCCESS"]])
def test_a_status_that_only_case_folds_or_converts_to_a_known_one_retries(status: object) -> None:
    """'\u017fuccess' (a long s) upper-cases to SUCCESS in Python; it is not a status the app sent."""
    body = orjson.dumps({"statuses": [{"entryId": "40", "status": status}]})
    assert statuses_from(body, batch()) == [LATER, LATER, LATER]


async def test_a_bulk_post_writes_each_entry_s_message_trace_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bulk subscriptions wrote no SubBefore/SubAfter records: each entry's now, with its own outcome."""
    records = TraceRecords()
    monkeypatch.setattr(msgtrace, "DISPATCHER", records)
    msgs = batch()
    rec = Recorded([answer(("40", "SUCCESS"), ("41", "DROP"), ("42", "RETRY"))])
    assert await bulk(rec)(msgs, MQ) == [OK, DEAD, LATER]
    assert records.subs == [
        (msgs[0].msg_id, True, "G"),
        (msgs[1].msg_id, False, "G"),
        (msgs[2].msg_id, False, "G"),
    ]
